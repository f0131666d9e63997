"""Arrays with data (numpy) or without (size-only), behind the few operations the models use.

A size-only tensor (`simcomm.size_only`) carries a shape and a dtype. `Meta` is a size-only tensor that also
follows numpy's shape rules through arithmetic, matmul, reshapes, transposes, indexing and reductions, so the same
model code runs on real data (to check numerics) and on shapes alone (to time a step at scale, as torch's meta
device does). Communication accepts both: a Meta tensor moves no data but costs the same time.
"""
from __future__ import annotations

import math

import numpy as np

from ...distributed.tensors import SizeOnly
from ...vocab import canonical_dtype, numpy_dtype


def _shape_of(x) -> tuple[int, ...]:
    return tuple(np.shape(x)) if not isinstance(x, SizeOnly) else x.shape


def _zero_view(shape, dtype=np.float64) -> np.ndarray:
    """An array of `shape` that uses no memory (every element is one zero): numpy computes index shapes on it."""
    return np.broadcast_to(np.zeros((), dtype), shape)


class Meta(SizeOnly):
    """A size-only tensor with numpy's shape semantics (arithmetic broadcasts, `@` contracts, ...)."""

    __array_priority__ = 100  # numpy defers `array + meta` to Meta

    # ---- shape -------------------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def T(self) -> "Meta":  # noqa: N802 - numpy's name
        return Meta(self.shape[::-1], self.dtype)

    def reshape(self, *shape) -> "Meta":
        if len(shape) == 1 and not np.isscalar(shape[0]):
            shape = tuple(shape[0])
        shape = list(shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = self.size // known if known else 0
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape size-only tensor of shape {self.shape} into {tuple(shape)}")
        return Meta(tuple(shape), self.dtype)

    def transpose(self, *axes) -> "Meta":
        axes = axes[0] if len(axes) == 1 and not np.isscalar(axes[0]) else axes
        axes = axes or tuple(range(self.ndim))[::-1]
        return Meta(tuple(self.shape[a] for a in axes), self.dtype)

    def swapaxes(self, a: int, b: int) -> "Meta":
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.transpose(order)

    def astype(self, dtype, copy=True) -> "Meta":
        return Meta(self.shape, dtype)

    def copy(self) -> "Meta":
        return self

    def __getitem__(self, index) -> "Meta":
        if isinstance(index, Meta):
            index = _zero_view(index.shape, bool if index.dtype == np.bool_ else np.int64)
        return Meta(_zero_view(self.shape)[index].shape, self.dtype)

    def __setitem__(self, index, value) -> None:
        """Writing into a size-only tensor stores nothing."""

    def __len__(self) -> int:
        return self.shape[0]

    # ---- reductions --------------------------------------------------------------------------------------
    def _reduce(self, axis=None, keepdims=False, **_) -> "Meta":
        axes = range(self.ndim) if axis is None else ((axis,) if np.isscalar(axis) else axis)
        axes = {a % self.ndim for a in axes}
        shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape) if keepdims or i not in axes)
        return Meta(shape, self.dtype)

    sum = mean = max = min = _reduce

    # ---- arithmetic --------------------------------------------------------------------------------------
    def _binary(self, other) -> "Meta":
        shape = np.broadcast_shapes(self.shape, _shape_of(other))
        return Meta(shape, self.dtype)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _binary
    __truediv__ = __rtruediv__ = __pow__ = __lt__ = __le__ = __gt__ = __ge__ = _binary

    def _inplace(self, other) -> "Meta":
        np.broadcast_shapes(self.shape, _shape_of(other))
        return self

    __iadd__ = __isub__ = __imul__ = __itruediv__ = _inplace

    def __neg__(self) -> "Meta":
        return self

    def __matmul__(self, other) -> "Meta":
        return Meta(matmul_shape(self.shape, _shape_of(other)), self.dtype)

    def __rmatmul__(self, other) -> "Meta":
        return Meta(matmul_shape(_shape_of(other), self.shape), self.dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        """np.exp(meta), np.add(meta, x, out=meta), np.add.at(meta, ...): shapes only."""
        if method == "at":
            return None
        if method != "__call__":
            return NotImplemented
        shape = np.broadcast_shapes(*(_shape_of(i) for i in inputs))
        result = Meta(shape, next(i.dtype for i in inputs if isinstance(i, SizeOnly)))
        return out[0] if out else result

    # a frozen dataclass's __eq__/__hash__ compare shape and dtype: keep that, ignore numpy-style eq


def matmul_shape(a: tuple, b: tuple) -> tuple:
    if a[-1] != b[-2 if len(b) > 1 else 0]:
        raise ValueError(f"matmul of shapes {a} and {b}: inner dimensions differ")
    if len(b) == 1:
        return a[:-1]
    return tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-1])


def is_meta(*xs) -> bool:
    """True if any argument is a size-only tensor."""
    return any(isinstance(x, SizeOnly) for x in xs)


def meta(shape, dtype="float32") -> Meta:
    """A Meta tensor (bfloat16 counts 2 bytes, as simcomm.size_only does)."""
    if isinstance(dtype, str):
        dtype = numpy_dtype(canonical_dtype(dtype))
    return Meta(tuple(shape), dtype)


def as_meta(x) -> Meta:
    """Meta with x's shape and dtype (x numpy, SizeOnly or Meta)."""
    return x if isinstance(x, Meta) else Meta(_shape_of(x), x.dtype)


def zeros(shape, dtype, size_only: bool = False):
    return Meta(tuple(shape), dtype) if size_only else np.zeros(shape, dtype)


def empty_like(x):
    return as_meta(x) if is_meta(x) else np.empty_like(x)


def zeros_like(x):
    return as_meta(x) if is_meta(x) else np.zeros_like(x)


def concat(xs, axis: int = 0):
    """np.concatenate, for data or shapes."""
    xs = list(xs)
    if not is_meta(*xs):
        return np.concatenate(xs, axis=axis)
    first = _shape_of(xs[0])
    axis %= len(first)
    return Meta(first[:axis] + (sum(_shape_of(x)[axis] for x in xs),) + first[axis + 1:], xs[0].dtype)


def split(x, parts: int, axis: int = 0) -> list:
    """np.split into equal parts, for data or shapes."""
    if not is_meta(x):
        return np.split(x, parts, axis=axis)
    shape = list(x.shape)
    if shape[axis] % parts:
        raise ValueError(f"cannot split axis {axis} of length {shape[axis]} into {parts} equal parts")
    shape[axis] //= parts
    return [Meta(tuple(shape), x.dtype) for _ in range(parts)]


def flat(x):
    """A 1-D view of x (data or shape)."""
    return x.reshape(-1)


def value(x) -> float | None:
    """A Python float of a scalar result, or None for a size-only one."""
    return None if is_meta(x) else float(x)
