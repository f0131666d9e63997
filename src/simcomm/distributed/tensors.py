"""The tensors ranks communicate: numpy arrays, size-only tensors, and CPU torch tensors when torch is installed.

Everything is seen through `as_array` (a numpy view that shares memory, so received data lands in place) or, for
size-only tensors, only through shape and dtype.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SizeOnly:
    """A tensor with a shape and dtype but no data: communication costs time, moves nothing."""

    shape: tuple[int, ...]
    dtype: np.dtype = np.dtype("float32")

    def __init__(self, shape, dtype="float32"):
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"SizeOnly shape must be non-negative, got {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", np.dtype(dtype))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def numel(self) -> int:
        return self.size


def size_only(*shape, dtype="float32") -> SizeOnly:
    """A size-only tensor: `size_only(1024, 1024, dtype="bfloat16")`-style shapes (bfloat16 counts 2 bytes)."""
    if len(shape) == 1 and not np.isscalar(shape[0]):
        shape = tuple(shape[0])
    return SizeOnly(shape, _dtype(dtype))


def _dtype(dtype) -> np.dtype:
    if isinstance(dtype, str) and dtype in ("bfloat16", "bf16"):
        return np.dtype("float16")  # same size; numerics of bf16 are not simulated
    return np.dtype(dtype)


def _is_torch(t) -> bool:
    return type(t).__module__.startswith("torch") and hasattr(t, "numpy")


def as_array(t) -> np.ndarray | None:
    """A numpy view of t's data (shared memory), or None for a size-only tensor (SizeOnly or torch meta)."""
    if isinstance(t, SizeOnly):
        return None
    if isinstance(t, np.ndarray):
        return t
    if _is_torch(t):
        if t.device.type == "meta":  # torch's own size-only tensors
            return None
        if t.device.type != "cpu":
            raise TypeError(f"simcomm needs CPU tensors, got a tensor on {t.device}")
        if str(t.dtype) == "torch.bfloat16":
            raise TypeError("simcomm cannot carry the data of a bfloat16 torch tensor (numpy has no bfloat16): "
                            "use float32 tensors for values, or simcomm.size_only(shape, dtype='bfloat16') for "
                            "timing only")
        return t.detach().numpy()
    raise TypeError(f"expected a numpy array, a simcomm SizeOnly or a CPU torch tensor, got {type(t).__name__}")


def shape_of(t) -> tuple[int, ...]:
    if isinstance(t, (SizeOnly, np.ndarray)) or _is_torch(t):
        return tuple(t.shape)
    raise TypeError(f"expected a numpy array, a simcomm SizeOnly or a CPU torch tensor, got {type(t).__name__}")


def dtype_of(t) -> np.dtype:
    if isinstance(t, (SizeOnly, np.ndarray)):
        return np.dtype(t.dtype)
    if _is_torch(t):
        import torch
        if t.dtype == torch.bfloat16:
            return np.dtype("float16")
        return np.dtype(torch.empty(0, dtype=t.dtype).numpy().dtype)
    raise TypeError(f"expected a numpy array, a simcomm SizeOnly or a CPU torch tensor, got {type(t).__name__}")


def nbytes_of(t) -> int:
    return math.prod(shape_of(t)) * dtype_of(t).itemsize


def numel_of(t) -> int:
    return math.prod(shape_of(t))


def describe(t) -> str:
    kind = "size-only " if isinstance(t, SizeOnly) else ""
    return f"{kind}{dtype_of(t).name}{list(shape_of(t))}"
