"""Field types for scenario files and workload specs (pydantic): sizes, rates, times and flop rates with their
units, collective/dtype/op/protocol names with did-you-mean, and the strict base model (unknown keys are errors)."""
from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from .units import UnitError, parse_rate, parse_size, parse_time
from .vocab import COLL_ALIASES, COLLECTIVES, DTYPE_ALIASES, DTYPES, OP_ALIASES, OPS, did_you_mean
from .vocab import MAX_NODES, MAX_RANKS, MAX_SIZE  # noqa: F401 (the bounds of scenario files, defined in vocab)
from .vocab import choice as _choice

PROTOCOL_NAMES = ("LL", "LL128", "Simple")
PLOTS = ("busbw", "timeline", "links", "schedule", "breakdown")


def _reason(exc: UnitError) -> str:
    return re.sub(r"^cannot parse \w+ .*?: ", "", str(exc), count=1)


def _size(v) -> int:
    try:
        n = parse_size(v)
    except UnitError as exc:
        raise ValueError(f"expected a size such as '64MiB', '1GB' or a whole number of bytes: {_reason(exc)}") from None
    if n > MAX_SIZE:
        raise ValueError("expected a size of at most 1PiB")
    return n


def _rate(v) -> float:
    if not isinstance(v, str):
        raise ValueError("expected a rate with its unit, such as '400Gbps' or '50GB/s' (a bare number is ambiguous)")
    try:
        return parse_rate(v)
    except UnitError as exc:
        raise ValueError(f"expected a rate such as '400Gbps' or '50GB/s': {_reason(exc)}") from None


def _time(v) -> float:
    if not isinstance(v, str) and v != 0:
        raise ValueError("expected a time with its unit, such as '1.5us' or '500ns' (a bare number is ambiguous)")
    try:
        t = parse_time(v)
    except UnitError as exc:
        raise ValueError(f"expected a time such as '1.5us' or '2ms': {_reason(exc)}") from None
    if t > 3600:
        raise ValueError("expected a time of at most one hour")
    return t


_FLOPS = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def _flops(v) -> float:
    """'790TFLOPS', '790 TFLOP/s', '790TFLOPs', '790 Tflops' or a number of flop/s (the unit's case is free; the
    prefix is k, M, G, T or P; g, t and p too)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        x = float(v)
    else:
        m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([kKMGTPgtp]?)((?i:flop(?:s|/s)?))?\s*", str(v)) \
            if isinstance(v, str) else None
        try:
            x = float(m.group(1)) * _FLOPS[m.group(2).upper()] if m else math.nan
        except ValueError:
            x = math.nan
    if not math.isfinite(x) or x <= 0:
        raise ValueError("expected a positive compute rate such as '790TFLOPS', '790 TFLOP/s' or 7.9e14")
    return x


Size = Annotated[int, BeforeValidator(_size)]
Rate = Annotated[float, BeforeValidator(_rate)]
Time = Annotated[float, BeforeValidator(_time)]
FlopRate = Annotated[float, BeforeValidator(_flops)]
CollectiveName = Annotated[str, BeforeValidator(lambda v: _choice(v, COLLECTIVES, COLL_ALIASES, "a collective"))]
DType = Annotated[str, BeforeValidator(lambda v: _choice(v, tuple(DTYPES), DTYPE_ALIASES, "a dtype"))]
Op = Annotated[str, BeforeValidator(lambda v: _choice(v, OPS, OP_ALIASES, "a reduce op"))]
Protocol = Annotated[str, BeforeValidator(lambda v: choice_exact(v, PROTOCOL_NAMES, "a protocol"))]


def choice_exact(v, choices, what) -> str:
    """The choice `v` names, ignoring case (protocol names keep their spelling: LL, LL128, Simple)."""
    if isinstance(v, str):
        for c in choices:
            if v.strip().lower() == c.lower():
                return c
    raise ValueError(f"expected {what}, one of {', '.join(choices)}{did_you_mean(v, choices)}")


def described(default: Any = ..., doc: str = "", type: str | None = None, **kw) -> Any:
    """A Field with a description and the type as the reference shows it."""
    extra = {"doc_type": type} if type else None
    return Field(default, description=doc, json_schema_extra=extra, **kw)


class Base(BaseModel):
    """A strict model: unknown keys are errors, and values are not coerced between types."""

    model_config = ConfigDict(extra="forbid", strict=True)
