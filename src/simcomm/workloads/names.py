"""Names users write for collectives, dtypes and ops, their aliases, and did-you-mean (no pydantic: the perf
command imports this and must start fast)."""
from __future__ import annotations

import difflib

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv",
               "gather", "scatter")
COLL_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
                "alltoall": "all_to_all", "bcast": "broadcast"}
# dtype -> (numpy dtype the simulation uses, nccl-tests type name). Types numpy lacks use one of equal size.
DTYPES = {"float32": ("float32", "float"), "float16": ("float16", "half"), "bfloat16": ("float16", "bfloat16"),
          "float64": ("float64", "double"), "int8": ("int8", "int8"), "uint8": ("uint8", "uint8"),
          "int32": ("int32", "int32"), "uint32": ("uint32", "uint32"), "int64": ("int64", "int64"),
          "uint64": ("uint64", "uint64"), "fp8_e4m3": ("uint8", "f8e4m3"), "fp8_e5m2": ("uint8", "f8e5m2")}
DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "bf16": "bfloat16", "fp32": "float32",
                 "fp16": "float16", "fp64": "float64", "int": "int32", "f32": "float32", "f16": "float16"}
OPS = ("sum", "prod", "min", "max", "avg")
OP_ALIASES = {"product": "prod"}


def did_you_mean(word, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice (case-insensitive), or ''."""
    lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(word).lower(), list(lower), n=1, cutoff=0.6)
    return f" (did you mean {lower[close[0]]!r}?)" if close else ""


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
