"""One vocabulary: collective kinds and their aliases, dtypes, reduce ops, and nccl-tests' conventions (what the
size S means, busbw factors, which table columns apply), with the algbw/busbw arithmetic every timing record uses.

Pure Python, no heavy imports: `simcomm perf` imports this and must start fast.
"""
from __future__ import annotations

import difflib
from typing import NamedTuple

from .errors import SimcommError

# Every collective the simulator runs; COLLECTIVES are the ones users sweep (nccl-tests has a binary for each).
KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather", "scatter", "all_to_all",
         "barrier", "sendrecv")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv",
               "gather", "scatter")
COLL_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
                "alltoall": "all_to_all", "bcast": "broadcast"}
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce", "gather", "scatter")
# nccl-tests' S is the whole buffer for these (count per rank = S / (n * typesize)); one rank's buffer otherwise.
PER_RANK_SHARD = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
# nccl-tests names its binaries <name>_perf, with all_to_all's name written without the underscore.
NCCL_TESTS_NAMES = {k: {"all_to_all": "alltoall"}.get(k, k) for k in COLLECTIVES}
# PyTorch profiler's "Collective name" for each kind.
TORCH_NAMES = {k: {"all_reduce": "allreduce", "all_gather": "allgather"}.get(k, k) for k in KINDS}
MAX_NODES, MAX_RANKS = 32768, 262144  # the largest cluster scenario files and `simcomm perf` accept
# Ranks on one host (cpu-host's processes per node): routes inside a node are worked out per class of alike
# endpoints (hardware/paths.py), so a 4,096-rank host builds in a fraction of a second; beyond, a launch's threads
# cost more than a user would wait for on one machine.
MAX_RANKS_PER_NODE = 4096
MAX_SIZE = 1 << 50  # bytes: 1 PiB, the largest buffer anything accepts; anything larger is a typo


class DType(NamedTuple):
    numpy: str  # the numpy dtype the simulation uses (types numpy lacks borrow one of equal size)
    nccl_tests: str  # nccl-tests' type column
    kernel: str  # the suffix of NCCL's kernel names
    torch: str  # PyTorch profiler's dtype name
    itemsize: int


DTYPES = {"float32": DType("float32", "float", "f32", "Float", 4),
          "float16": DType("float16", "half", "f16", "Half", 2),
          "bfloat16": DType("float16", "bfloat16", "bf16", "BFloat16", 2),
          "float64": DType("float64", "double", "f64", "Double", 8),
          "int8": DType("int8", "int8", "i8", "Char", 1), "uint8": DType("uint8", "uint8", "u8", "Byte", 1),
          "int32": DType("int32", "int32", "i32", "Int", 4), "uint32": DType("uint32", "uint32", "u32", "UInt32", 4),
          "int64": DType("int64", "int64", "i64", "Long", 8), "uint64": DType("uint64", "uint64", "u64", "UInt64", 8),
          "fp8_e4m3": DType("uint8", "f8e4m3", "f8e4m3", "Float8_e4m3fn", 1),
          "fp8_e5m2": DType("uint8", "f8e5m2", "f8e5m2", "Float8_e5m2", 1)}
# nccl-tests' type names (float, half, double, f8e4m3, ...) and the usual short names.
DTYPE_ALIASES = {**{d.nccl_tests: k for k, d in DTYPES.items() if d.nccl_tests != k},
                 "bf16": "bfloat16", "fp32": "float32", "fp16": "float16", "fp64": "float64", "int": "int32",
                 "f32": "float32", "f16": "float16"}
# nccl-tests' `-d all` list, in its order (the fp8 types are left out, as nccl-tests does).
NCCL_TESTS_ALL_DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
                         "bfloat16")

OPS = ("sum", "prod", "min", "max", "avg")
NCCL_TESTS_ALL_OPS = ("sum", "prod", "max", "min", "avg")  # nccl-tests' `-o all` list, in its order
OP_ALIASES = {"product": "prod"}
OP_NAMES = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}  # -> ReduceOp names


def busbw_factor(kind: str, n: int) -> float:
    """nccl-tests' busbw = algbw * factor(n), which makes busbw comparable to a link's speed whatever n is."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in PER_RANK_SHARD:
        return (n - 1) / n
    if kind in KINDS:
        return 1.0
    raise SimcommError(f"unknown collective {kind!r}; expected one of {', '.join(KINDS)}")


class Bandwidth:
    """algbw and busbw as nccl-tests defines them, for any record with `collective`, `ranks` (group size),
    `size` (nccl-tests' S in bytes) and `time` (seconds)."""

    collective: str
    ranks: int
    size: int
    time: float

    @property
    def algbw(self) -> float:
        """bytes/s: S / time."""
        return self.size / self.time if self.time > 0 else 0.0

    @property
    def busbw(self) -> float:
        """bytes/s: algbw times the collective's factor."""
        return self.algbw * busbw_factor(self.collective, self.ranks)


def did_you_mean(word, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice (case-insensitive), or ''."""
    lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(word).lower(), list(lower), n=1, cutoff=0.6)
    if not close or lower[close[0]] == str(word):  # never suggest the very name that was refused
        return ""
    return f" (did you mean {lower[close[0]]!r}?)"


def choice(value, choices, aliases, what: str) -> str:
    """The canonical name of `value` (lower case, '-' as '_', aliases resolved) or ValueError with a hint."""
    if not isinstance(value, str):
        raise ValueError(f"expected {what}, one of {', '.join(choices)}")
    key = value.strip().lower().replace("-", "_")
    key = aliases.get(key, key)
    if key not in choices:
        raise ValueError(f"expected {what}, one of {', '.join(choices)}"
                         f"{did_you_mean(value, list(choices) + list(aliases))}")
    return key


def canonical_kind(kind: str) -> str:
    """'allreduce', 'all-reduce', 'All_Reduce' -> 'all_reduce'; a SimcommError naming the kinds otherwise."""
    try:
        return choice(kind, KINDS, COLL_ALIASES, "a collective")
    except ValueError as exc:
        raise SimcommError(f"unknown collective {kind!r}: {exc}") from None


def per_rank_count(kind: str, size: int, itemsize: int, n: int) -> int:
    """Elements per rank for nccl-tests' size S (simcomm's Collective.count convention)."""
    return size // (itemsize * n) if kind in PER_RANK_SHARD else size // itemsize


def canonical_dtype(dtype: str) -> str:
    """'bf16', 'half', 'f8e4m3', 'Float32' -> the vocabulary's name (bfloat16, float16, ...); a SimcommError naming
    the dtypes otherwise."""
    try:
        return choice(dtype, tuple(DTYPES), DTYPE_ALIASES, "a dtype")
    except ValueError as exc:
        raise SimcommError(f"unknown dtype {dtype!r}: {exc}") from None


def numpy_dtype(name: str) -> str:
    """The numpy dtype the simulation uses for a vocabulary dtype name (bfloat16 and fp8 borrow equal sizes)."""
    return DTYPES[name].numpy if name in DTYPES else name
