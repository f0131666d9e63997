"""Coalesced collectives: several tensors in one call, as torch's all_reduce_coalesced / all_gather_coalesced.

The tensors travel as one flat buffer (torch flattens them too), so the time is that of one collective over their
total size; the results are written back into each tensor.
"""
from __future__ import annotations

import numpy as np

from ..algorithms import ReduceOp
from ..errors import DistError
from . import collectives as c
from .runtime import current
from .tensors import size_only, tensor_arg, write
from .work import Work


def _flat(call: str, tensors, output: bool = False, reduce: bool = False):
    _, me = current()
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise DistError(f"rank {me}: {call}: expected a non-empty list of tensors, got {tensors!r}")
    args = [tensor_arg(t, call, f"tensors[{i}]", output=output, reduce=reduce) for i, t in enumerate(tensors)]
    for i, a in enumerate(args):
        if a.dtype != args[0].dtype or (a.data is None) != (args[0].data is None):
            raise DistError(f"rank {me}: {call}: tensors[{i}] is {a.describe()} but tensors[0] is "
                            f"{args[0].describe()}: a coalesced call needs one dtype")
    total = sum(a.numel for a in args)
    if args[0].data is None:
        return args, size_only(total, dtype=args[0].dtype.name)
    return args, np.concatenate([a.flat() for a in args]) if total else np.zeros(0, args[0].sim_dtype)


def _unflatten(args, flat) -> None:
    offset = 0
    for a in args:
        write(a, flat[offset:offset + a.numel])
        offset += a.numel


class _Then(Work):
    """A Work that writes the flat result back into the caller's tensors once complete."""

    def __init__(self, work: Work, after, outputs):
        super().__init__(work._runtime, work._rank, work._event, work._what, outputs)
        self._after, self._done = after, False

    def wait(self, timeout=None) -> bool:
        super().wait(timeout)
        if not self._done:
            self._after()
            self._done = True
        return True


def all_reduce_coalesced(tensors, op=ReduceOp.SUM, group=None, async_op=False):
    """all_reduce every tensor of the list (one flat collective)."""
    args, flat = _flat("all_reduce_coalesced", tensors, output=True, reduce=True)
    work = c.all_reduce(flat, op, group, async_op)
    after = (lambda: _unflatten(args, flat)) if isinstance(flat, np.ndarray) else (lambda: None)
    if async_op and work is not None:
        return _Then(work, after, list(tensors))
    after()
    return None


def all_gather_coalesced(output_tensor_lists, input_tensor_list, group=None, async_op=False):
    """output_tensor_lists[i][j] becomes group rank i's input_tensor_list[j] (one flat all_gather)."""
    call = "all_gather_coalesced"
    args, flat = _flat(call, input_tensor_list)
    _, me = current()
    if not isinstance(output_tensor_lists, (list, tuple)):
        raise DistError(f"rank {me}: {call}: output_tensor_lists must be a list of lists of tensors")
    outs = []
    for i, lst in enumerate(output_tensor_lists):
        o, _ = _flat(call, lst, output=True)
        if [a.numel for a in o] != [a.numel for a in args] or o[0].dtype != args[0].dtype:
            raise DistError(f"rank {me}: {call}: output_tensor_lists[{i}] must match input_tensor_list's sizes "
                            "and dtype")
        outs.append(o)
    gathered = [np.zeros_like(flat) for _ in outs] if isinstance(flat, np.ndarray) else [flat for _ in outs]
    work = c.all_gather(gathered, flat, group, async_op)

    def after():
        if isinstance(flat, np.ndarray):
            for o, g in zip(outs, gathered):
                _unflatten(o, g)
    if async_op and work is not None:
        return _Then(work, after, list(output_tensor_lists))
    after()
    return None
