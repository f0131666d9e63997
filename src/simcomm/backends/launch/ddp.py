"""DistributedDataParallel in a launched rank: its C++ Reducer talks to the rank's SimProcessGroup (process_group.py);
these patches let it run on the CPU tensors that stand for GPU ones here, and on meta parameters (size only).

On meta parameters DDP's C++ side cannot read back what it sends through the group (parameter shapes at
construction, the bucket order it rebuilds after the first step), so there the shape check runs on one-element
CPU stand-ins of the same shapes, and the buckets are the ones DDP would rebuild for a model whose backward runs in
reverse definition order (a first small bucket, then bucket_cap_mb each) from the first step on.
"""
from __future__ import annotations

import functools
import threading

import torch
import torch.distributed as tdist
from torch.nn.parallel import distributed as ddp_module

from .context import current_context

_building = threading.local()  # .meta: a DDP on meta parameters is being constructed on this thread


def _init(original):
    """DDP.__init__: a script's "cuda" modules live on the CPU (or meta device) here, where DDP refuses
    device_ids / output_device, so those two are dropped (they only place inputs and outputs)."""
    @functools.wraps(original)
    def __init__(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if current_context() is None:
            return original(self, module, device_ids, output_device, *args, **kwargs)
        _building.meta = any(p.is_meta for p in module.parameters())
        try:
            original(self, module, None, None, *args, **kwargs)
        finally:
            meta, _building.meta = _building.meta, False
        if meta:
            self.reducer = _MetaReducer(self.reducer)
    return __init__


def _verify_param_shapes(original):
    """torch's check that every rank's parameters have the same shapes, on one-element stand-ins of meta ones."""
    @functools.wraps(original)
    def verify(process_group, tensors, logger=None):
        if current_context() is not None and any(t.is_meta for t in tensors):
            tensors = [torch.empty((), dtype=t.dtype).expand(t.shape) for t in tensors]
        return original(process_group, tensors, logger)
    return verify


def _bucket_limits(original):
    """On meta parameters, the sized buckets from the first step (DDP puts everything in one bucket for the first
    step and rebuilds them after it, which it cannot do there)."""
    @functools.wraps(original)
    def limits(self, static_graph, find_unused_parameters):
        if getattr(_building, "meta", False):
            return original(self, False, True)
        return original(self, static_graph, find_unused_parameters)
    return limits


class _MetaReducer:
    """DDP's Reducer on meta parameters: never rebuilds its buckets (see the module's docstring)."""

    def __init__(self, reducer):
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self._reducer, name)


def _real_reducer(original):
    """torch's C++ functions that take DDP's reducer get the Reducer itself."""
    @functools.wraps(original)
    def call(reducer, *args, **kwargs):
        return original(getattr(reducer, "_reducer", reducer), *args, **kwargs)
    return call


def patches() -> list[tuple[object, str, object]]:
    """(owner, name, replacement) for every attribute this module patches."""
    ddp = ddp_module.DistributedDataParallel
    config = ddp_module._BucketCapacityConfig
    out = [(ddp, "__init__", _init(ddp.__init__)),
           (ddp_module, "_verify_param_shape_across_processes",
            _verify_param_shapes(ddp_module._verify_param_shape_across_processes)),
           (config, "compute_bucket_size_limits", _bucket_limits(config.compute_bucket_size_limits))]
    out += [(tdist, name, _real_reducer(getattr(tdist, name)))
            for name in ("_register_comm_hook", "_register_builtin_comm_hook")]
    return out
