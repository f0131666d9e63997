"""CUDA without GPUs: `.cuda()`, `device="cuda"`, `.to(rank)` and torch.cuda's device calls map onto CPU tensors
(real data) or meta tensors (size only), and the simulated GPU answers torch.cuda's questions.

`DeviceMode` is a TorchFunctionMode (thread-local in torch): it is entered in each rank thread only.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from .context import current_context

_REAL_DEVICE = torch.device


def _is_cuda(d) -> bool:
    if isinstance(d, bool):
        return False
    if isinstance(d, int):
        return True  # a bare ordinal means a CUDA device
    if isinstance(d, str):
        return d.split(":")[0].strip() == "cuda"
    return isinstance(d, _REAL_DEVICE) and d.type == "cuda"


class DeviceMode(TorchFunctionMode):
    """Rewrites CUDA device arguments to `target` ("cpu" keeps data, "meta" keeps only shapes)."""

    def __init__(self, target: str = "cpu"):
        super().__init__()
        self.target = _REAL_DEVICE(target)

    def _map(self, d):
        return self.target if _is_cuda(d) else d

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name == "cuda" and args:  # Tensor.cuda(device=None, non_blocking=False, ...)
            return args[0].to(self.target)
        if name == "pin_memory" and args:
            return args[0]
        if "device" in kwargs:
            kwargs["device"] = self._map(kwargs["device"])
        if name == "to" and len(args) > 1 and not isinstance(args[1], (torch.dtype, torch.Tensor)):
            args = (args[0], self._map(args[1])) + tuple(args[2:])
        return func(*args, **kwargs)


class _DeviceMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, _REAL_DEVICE)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, _REAL_DEVICE)


class LaunchDevice(metaclass=_DeviceMeta):
    """torch.device during a launch: a bare ordinal (torch.device(torch.cuda.current_device())) means a CUDA
    device even though this machine has none; everything else is torch.device itself."""

    def __new__(cls, *args, **kwargs):
        if current_context() is not None and len(args) == 1 and isinstance(args[0], int) \
                and not isinstance(args[0], bool) and not kwargs:
            return _REAL_DEVICE("cuda", args[0])
        return _REAL_DEVICE(*args, **kwargs)


def _device_index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        return device
    d = _REAL_DEVICE(device) if isinstance(device, str) else device
    return d.index or 0


def cuda_functions(originals) -> dict:
    """Replacements for torch.cuda's functions: the simulated GPU in a rank thread, the originals elsewhere."""

    def in_rank(fn, fallback):
        def wrapper(*args, **kwargs):
            ctx = current_context()
            if ctx is None or not ctx.world.gpu:
                return fallback(*args, **kwargs)
            return fn(ctx, *args, **kwargs)
        wrapper.__name__ = getattr(fallback, "__name__", "wrapper")
        wrapper.__doc__ = getattr(fallback, "__doc__", None)
        return wrapper

    def set_device(ctx, device):
        idx = _device_index(device)
        if not 0 <= idx < ctx.world.gpus_per_node:
            raise RuntimeError(f"CUDA error: invalid device ordinal {idx} (the simulated node has "
                               f"{ctx.world.gpus_per_node} GPUs)")
        ctx.cuda_device = idx

    def synchronize(ctx, device=None):
        from .compute import flush
        flush(ctx)

    table = {
        "is_available": lambda ctx: True,
        "is_initialized": lambda ctx: True,
        "init": lambda ctx: None,
        "device_count": lambda ctx: ctx.world.gpus_per_node,
        "current_device": lambda ctx: ctx.cuda_device,
        "set_device": set_device,
        "synchronize": synchronize,
        "get_device_name": lambda ctx, device=None: ctx.world.device_name,
        "empty_cache": lambda ctx: None,
        "manual_seed": lambda ctx, seed: None,  # CUDA generators only: mapped tensors use the CPU generator
        "manual_seed_all": lambda ctx, seed: None,
        # no CUDA generator to save or restore (torch.random.fork_rng over "cuda" devices asks for one)
        "get_rng_state": lambda ctx, device="cuda": torch.zeros(0, dtype=torch.uint8),
        "set_rng_state": lambda ctx, new_state, device="cuda": None,
        "get_rng_state_all": lambda ctx: [torch.zeros(0, dtype=torch.uint8)] * ctx.world.gpus_per_node,
        "set_rng_state_all": lambda ctx, new_states: None,
        "memory_allocated": lambda ctx, device=None: 0,
        "max_memory_allocated": lambda ctx, device=None: 0,
        "reset_peak_memory_stats": lambda ctx, device=None: None,
    }
    return {name: in_rank(fn, originals[name]) for name, fn in table.items() if name in originals}
