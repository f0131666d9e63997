"""Reduction operators with torch.distributed's names and dtype rules."""
from __future__ import annotations

import numpy as np

from ..errors import AlgorithmError


class ReduceOp:
    """SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM; compare by name like torch's RedOpType."""

    SUM: "ReduceOp"
    AVG: "ReduceOp"
    PRODUCT: "ReduceOp"
    MIN: "ReduceOp"
    MAX: "ReduceOp"
    BAND: "ReduceOp"
    BOR: "ReduceOp"
    BXOR: "ReduceOp"
    PREMUL_SUM: "ReduceOp"

    def __init__(self, name: str, factor=None):
        self.name = name
        self.factor = factor

    def __eq__(self, other) -> bool:
        return isinstance(other, ReduceOp) and other.name == self.name and other.factor == self.factor

    def __hash__(self) -> int:
        return hash((self.name, self.factor))

    def __repr__(self) -> str:
        return f"ReduceOp.{self.name}" + (f"({self.factor})" if self.factor is not None else "")


for _name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
    setattr(ReduceOp, _name, ReduceOp(_name))


def make_premul_sum(factor) -> ReduceOp:
    """PREMUL_SUM with a scalar factor (torch's dist._make_nccl_premul_sum): a Python float or a one-element
    tensor (numpy array or torch tensor). Like torch 2.13, an int, a bool or a numpy scalar other than float64 is
    refused: torch's binding takes `float` or `Tensor` only."""
    if isinstance(factor, float):
        return ReduceOp("PREMUL_SUM", float(factor))
    is_tensor = isinstance(factor, np.ndarray) or type(factor).__module__.split(".")[0] == "torch"
    if is_tensor and getattr(factor, "ndim", None) is not None:
        if int(np.prod(factor.shape)) != 1:
            raise AlgorithmError(f"PREMUL_SUM's factor tensor must hold one element, got shape "
                                 f"{tuple(factor.shape)}")
        return ReduceOp("PREMUL_SUM", float(factor.reshape(-1)[0]))
    raise AlgorithmError(f"_make_nccl_premul_sum(factor): factor must be a float or a one-element tensor, as "
                         f"torch's binding requires; got {type(factor).__name__} {factor!r}"
                         + (f" (write {float(factor)!r})" if isinstance(factor, (int, np.number))
                            and not isinstance(factor, bool) else ""))


def premultiply(ops: list[ReduceOp], rows: np.ndarray) -> tuple[ReduceOp, np.ndarray]:
    """Each rank's PREMUL_SUM factor applied to its own row (as NCCL does: every rank scales its input by its
    own factor, then the rows are summed); returns the op the group reduction then applies and the rows."""
    if not ops or ops[0].name != "PREMUL_SUM":
        return ops[0], rows
    if rows is not None:
        rows = np.stack([(row * row.dtype.type(op.factor)).astype(row.dtype) for op, row in zip(ops, rows)])
    return ReduceOp("PREMUL_SUM", 1.0), rows


_UFUNC = {"SUM": np.add, "AVG": np.add, "PREMUL_SUM": np.add, "PRODUCT": np.multiply, "MIN": np.minimum,
          "MAX": np.maximum, "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}


def as_reduce_op(op) -> ReduceOp:
    if isinstance(op, ReduceOp):
        return op
    name = getattr(op, "name", op)
    if isinstance(name, str) and name.upper() in _UFUNC:
        return getattr(ReduceOp, name.upper())
    raise AlgorithmError(f"unknown reduce op {op!r}; expected one of {sorted(_UFUNC)}")


def check_op(op: ReduceOp, dtype: np.dtype, backend: str = "nccl", process_group: bool = False) -> None:
    """Raise the error torch would for op on dtype (bitwise ops need integers; complex can only be summed).

    process_group: also torch's ProcessGroupNCCL rules (it refuses bitwise ops and AVG of booleans, which the
    algorithms themselves could run)."""
    dtype = np.dtype(dtype)
    if process_group and backend == "nccl":
        if op.name in ("BAND", "BOR", "BXOR"):
            raise AlgorithmError(f"Cannot use ReduceOp.{op.name} with NCCL")
        if op.name == "AVG" and dtype.kind == "b":
            raise AlgorithmError("Cannot use ReduceOp.AVG with boolean inputs")
    integral = dtype.kind in "iub"
    if op.name in ("BAND", "BOR", "BXOR") and not integral:
        raise AlgorithmError(f"Cannot use ReduceOp.{op.name} with non-integral dtype {dtype.name}")
    if dtype.kind == "c" and op.name in ("MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR"):
        raise AlgorithmError(f"all_reduce does not support ReduceOp.{op.name} on complex tensors")
    if op.name == "PREMUL_SUM" and backend == "gloo":
        raise AlgorithmError("ReduceOp.PREMUL_SUM is only supported by the nccl backend")
    if op.name == "AVG" and backend == "gloo" and dtype.kind in "iub":
        # torch 2.13's gloo sums, then divides in floating point and cannot cast back (measured).
        raise AlgorithmError(f"ReduceOp.AVG on {dtype.name} tensors fails on gloo: result type Float can't be "
                             f"cast to the desired output type; use SUM and divide, or a floating dtype")


def combine(op: ReduceOp, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a (op) b elementwise, in the dtype of a."""
    if a.dtype == np.bool_ and op.name in ("SUM", "AVG", "PREMUL_SUM"):
        return np.logical_or(a, b, out=out)
    if a.dtype == np.bool_ and op.name == "PRODUCT":
        return np.logical_and(a, b, out=out)
    return _UFUNC[op.name](a, b, out=out)


def prepares(op: ReduceOp, dtype: np.dtype, premultiply: bool) -> bool:
    """Whether prepare() changes inputs of this dtype (so a reduction reading the ranks' own arrays cannot)."""
    return op.name == "PREMUL_SUM" or (op.name == "AVG" and premultiply and np.dtype(dtype).kind in "fc")


def prepare(op: ReduceOp, x: np.ndarray, n: int, premultiply: bool) -> np.ndarray:
    """Inputs as the reduction sees them: PREMUL_SUM scales each input; NCCL float AVG pre-multiplies by 1/n."""
    if op.name == "PREMUL_SUM":
        return (x * x.dtype.type(op.factor)).astype(x.dtype)
    if op.name == "AVG" and premultiply and x.dtype.kind in "fc":
        return (x * x.dtype.type(1.0 / n)).astype(x.dtype)
    return x


def finish(op: ReduceOp, x: np.ndarray, n: int, premultiply: bool) -> np.ndarray:
    """The last touch of a reduction: AVG divides by n unless the inputs were pre-multiplied."""
    if op.name != "AVG" or (premultiply and x.dtype.kind in "fc"):
        return x
    if x.dtype.kind in "iu":
        q = np.abs(x) // n  # C integer division truncates toward zero
        return np.where(x < 0, -q, q).astype(x.dtype)
    if x.dtype.kind == "b":
        return x
    return (x / x.dtype.type(n)).astype(x.dtype)
