"""The tensors ranks communicate: numpy arrays, size-only tensors, and CPU (or meta) torch tensors.

One place decides what a tensor argument is (`tensor_arg`): its torch dtype name, shape, and a numpy view that
shares its memory (None for size-only tensors). The dtypes are exactly torch's communicable dtypes (TORCH_DTYPES);
anything else (numpy strings, objects, datetimes, structured or byte-swapped arrays, torch's quantized and
sub-byte types) is refused with a DistError naming the rank and the call. One place writes results back
(`write`; `write_all` for many ranks at once): into any view or stride, never into a read-only buffer (refused
when the call is made).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy 1.x
    byte_bounds = np.byte_bounds

from ..arrays import PARALLEL_BYTES, in_parts
from ..errors import DistError
from .runtime import current


@dataclass(frozen=True)
class DType:
    """A torch dtype as simcomm carries it: `numpy` holds its values (None when numpy has no such type: the bytes
    then travel as same-size unsigned integers and cannot be reduced)."""

    name: str
    itemsize: int
    numpy: str | None

    @property
    def carrier(self) -> np.dtype:
        """The numpy dtype whose elements hold this dtype's bytes."""
        return np.dtype(self.numpy or f"u{self.itemsize}")

    @property
    def reducible(self) -> bool:
        return self.numpy is not None


def _stand_in(dt: DType) -> np.dtype:
    """A numpy dtype of dt's size that timing-only runs use (bfloat16 counts as float16, fp8 as uint8)."""
    return np.dtype(dt.numpy or {2: "float16", 4: "float32"}.get(dt.itemsize, "uint8"))


def _table(*rows) -> dict[str, DType]:
    return {r[0]: DType(*r) for r in rows}


# torch 2.13's dtypes that a collective can carry (bits*, quantized and sub-byte types cannot be communicated).
TORCH_DTYPES = _table(
    ("bool", 1, "bool"), ("uint8", 1, "uint8"), ("int8", 1, "int8"), ("int16", 2, "int16"), ("uint16", 2, "uint16"),
    ("int32", 4, "int32"), ("uint32", 4, "uint32"), ("int64", 8, "int64"), ("uint64", 8, "uint64"),
    ("float16", 2, "float16"), ("bfloat16", 2, None), ("float32", 4, "float32"), ("float64", 8, "float64"),
    ("complex32", 4, None), ("complex64", 8, "complex64"), ("complex128", 16, "complex128"),
    ("float8_e4m3fn", 1, None), ("float8_e5m2", 1, None), ("float8_e4m3fnuz", 1, None), ("float8_e5m2fnuz", 1, None),
    ("float8_e8m0fnu", 1, None))
# Names users type for size-only tensors (simcomm's vocabulary) -> torch's.
DTYPE_ALIASES = {"bf16": "bfloat16", "half": "float16", "float": "float32", "double": "float64", "fp16": "float16",
                 "fp32": "float32", "fp64": "float64", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
                 "chalf": "complex32", "cfloat": "complex64", "cdouble": "complex128", "long": "int64", "int": "int32",
                 "short": "int16"}
_BY_NUMPY = {np.dtype(d.numpy): d for d in TORCH_DTYPES.values() if d.numpy}


def torch_dtype(dtype) -> DType:
    """The torch dtype for a name, a numpy dtype or a torch dtype; a DistError saying why not otherwise."""
    if isinstance(dtype, DType):
        return dtype
    text = str(dtype)
    if text.startswith("torch."):
        text = text[len("torch."):]
    if isinstance(dtype, str) or text in TORCH_DTYPES:
        name = DTYPE_ALIASES.get(text, text)
        if name in TORCH_DTYPES:
            return TORCH_DTYPES[name]
    try:
        np_dtype = np.dtype(dtype)
    except (TypeError, ValueError):
        raise DistError(f"unknown dtype {dtype!r}; torch.distributed carries {', '.join(TORCH_DTYPES)}") from None
    if np_dtype.isnative and np_dtype in _BY_NUMPY and np_dtype.fields is None:
        return _BY_NUMPY[np_dtype]
    why = "non-native byte order" if not np_dtype.isnative else "no torch equivalent"
    raise DistError(f"numpy dtype {np_dtype.str!r} ({np_dtype}) has {why}; torch.distributed carries "
                    f"{', '.join(TORCH_DTYPES)}")


@dataclass(frozen=True)
class SizeOnly:
    """A tensor with a shape and dtype but no data: communication costs time, moves nothing."""

    shape: tuple[int, ...]
    dtype: np.dtype = np.dtype("float32")  # the numpy dtype of equal size (bfloat16 counts as 2 bytes)
    torch_dtype: str = "float32"

    def __init__(self, shape, dtype="float32"):
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        dt = torch_dtype(dtype)
        for s in shape:
            if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) or s < 0:
                text = next((x for x in shape if isinstance(x, str)), None)
                hint = "" if text is None else (
                    f"; for {text!r} of {dt.name} use size_only(parse_size({text!r}) // "
                    f"{_stand_in(dt).itemsize}, dtype={dt.name!r}) (from simcomm.units import parse_size)")
                raise DistError(f"size_only: a shape counts elements (whole numbers >= 0), got {shape!r}{hint}")
        object.__setattr__(self, "shape", tuple(int(s) for s in shape))
        object.__setattr__(self, "dtype", _stand_in(dt))
        object.__setattr__(self, "torch_dtype", dt.name)

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
    return SizeOnly(shape, dtype)


def _is_torch(t) -> bool:
    return type(t).__module__.startswith("torch") and hasattr(t, "numpy") and hasattr(t, "dtype")


@dataclass(frozen=True, eq=False)
class Arg:
    """One tensor argument of one call, checked: its torch dtype, shape and data (None: size-only)."""

    tensor: object
    dtype: DType
    shape: tuple[int, ...]
    data: np.ndarray | None  # shares the tensor's memory (its bytes, for dtypes numpy lacks)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def sim_dtype(self) -> np.dtype:
        """The numpy dtype the simulation uses: the data's own (bytes as unsigned integers for dtypes numpy
        lacks), or for size-only tensors the dtype's numpy twin or a float of the same size."""
        if self.data is not None:
            return self.data.dtype
        return _stand_in(self.dtype)

    def flat(self) -> np.ndarray:
        """The data in logical (row-major) order, as a contiguous copy when the view is strided."""
        return np.ascontiguousarray(self.data).reshape(-1)

    def describe(self) -> str:
        return f"{'size-only ' if self.data is None else ''}{self.dtype.name}{list(self.shape)}"


def _where(call: str) -> str:
    try:
        return f"rank {current()[1]}: {call}"
    except Exception:  # noqa: BLE001 - outside a rank program, say only the call
        return call


def tensor_arg(t, call: str, role: str = "tensor", output: bool = False, reduce: bool = False,
               contiguous: bool = False) -> Arg:
    """Check tensor argument `role` of `call` (written into if `output`, reduced if `reduce`; a torch tensor must
    be contiguous if `contiguous`, as torch's send and recv require: its collectives copy views)."""
    try:
        arg = _arg(t)
    except DistError as exc:
        raise DistError(f"{_where(call)}: {role}: {exc}") from None
    if contiguous and _is_torch(t) and not t.is_contiguous():
        raise DistError(f"{_where(call)}: input tensor has to be contiguous (torch's send and recv take contiguous "
                        "tensors only)")
    if output and arg.data is not None and not arg.data.flags.writeable:
        raise DistError(f"{_where(call)}: {role} is read-only ({arg.describe()}); results are written into it, so "
                        "pass a writable array")
    if reduce and arg.data is not None and not arg.dtype.reducible:
        raise DistError(f"{_where(call)}: {role}: simcomm cannot reduce the data of {arg.dtype.name} tensors (numpy "
                        f"has no {arg.dtype.name}); reduce float32 tensors, or use size-only tensors for timing")
    return arg


def _arg(t) -> Arg:
    if isinstance(t, SizeOnly):
        return Arg(t, TORCH_DTYPES[t.torch_dtype], t.shape, None)
    if isinstance(t, np.ndarray):
        return Arg(t, torch_dtype(t.dtype), tuple(t.shape), t)
    if _is_torch(t):
        dt = torch_dtype(t.dtype)
        if t.device.type == "meta":  # torch's own size-only tensors
            return Arg(t, dt, tuple(t.shape), None)
        if t.device.type != "cpu":
            raise DistError(f"simcomm needs CPU (or meta) tensors, got a tensor on {t.device}")
        if t.is_sparse or getattr(t, "is_quantized", False):
            raise DistError("sparse and quantized tensors cannot be communicated")
        d = t.detach()
        if dt.numpy is None:
            import torch
            d = d.view({1: torch.uint8, 2: torch.uint16, 4: torch.uint32}[dt.itemsize])
        return Arg(t, dt, tuple(t.shape), d.numpy())
    raise DistError(f"expected a numpy array, a simcomm.size_only tensor or a CPU torch tensor, got "
                    f"{type(t).__name__}")


def write(arg: Arg, values) -> None:
    """Store a result (logical row-major order, any shape of the right size) into arg's memory, whatever its
    strides; size-only tensors take nothing."""
    if arg.data is not None:
        arg.data[...] = np.asarray(values).reshape(arg.shape)


def write_all(pairs: list[tuple[Arg, object]]) -> None:
    """write(arg, values) for every pair, in order; the copies are spread over the cores when they are large
    (arrays.in_parts: 1,024 ranks taking a 4 MiB result copy 4 GiB) and no two tensors share memory (ranks that
    pass views of one array get them written one after another, the last pair's values last, as ever)."""
    def work(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            write(*pairs[i])
    nbytes = sum(a.nbytes for a, _ in pairs)
    if nbytes >= PARALLEL_BYTES and _apart([a for a, _ in pairs]):
        in_parts(work, len(pairs), nbytes)
    else:
        work(0, len(pairs))


def _apart(args: list[Arg]) -> bool:
    """Whether no two of these tensors' memory ranges overlap."""
    spans = sorted(byte_bounds(a.data) for a in args if a.data is not None and a.data.size)
    return all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))


def as_array(t) -> np.ndarray | None:
    """A numpy view of t's data (shared memory), or None for a size-only tensor (SizeOnly or torch meta)."""
    return _arg(t).data


def shape_of(t) -> tuple[int, ...]:
    return _arg(t).shape


def dtype_of(t) -> np.dtype:
    """The numpy dtype the simulation uses for t (bfloat16 and other types numpy lacks borrow an equal size)."""
    return _arg(t).sim_dtype


def nbytes_of(t) -> int:
    return _arg(t).nbytes


def numel_of(t) -> int:
    return _arg(t).numel


def describe(t) -> str:
    return _arg(t).describe()
