"""Parse and format sizes, rates and times.

Internal units: sizes are bytes (int), rates are bytes/second (float), times
are seconds (float).

Bits are never guessed: a rate must say ``bps``/``b/s`` (bits) or ``B/s``/``Bps``
(bytes) explicitly, so ``"400G"`` is rejected as ambiguous, and a size is always
in bytes, so ``"8Mb"`` (megabits) is rejected.  Decimal prefixes (KB, MB, GB,
Gbps, GB/s, ...) are powers of 1000; binary ones (KiB, MiB, GiB/s, ...) are
powers of 1024.  For sizes, the nccl-tests shorthand K, M, G, T (as in
``all_reduce_perf -b 8 -e 8G``) means powers of 1024: ``"8G"`` is 8 * 2**30.
"""

from __future__ import annotations

import argparse
import math
import numbers
import re
from fractions import Fraction
from typing import Callable, Optional, Union

from .errors import UnitError, shown

__all__ = ["UnitError", "parse_size", "parse_rate", "parse_time", "parse_whole", "parse_positive",
           "format_size", "format_rate", "format_time", "whole", "wholes", "positive", "sizes"]


_DEC = ["K", "M", "G", "T", "P"]
_PREFIX_NAME = {"": "", "k": "kilo", "K": "kilo", "M": "mega", "G": "giga",
                "T": "tera", "P": "peta", "Ki": "kibi", "Mi": "mebi",
                "Gi": "gibi", "Ti": "tebi", "Pi": "pebi"}

_SIZE_UNITS: dict[str, int] = {"B": 1}
_SIZE_UNITS.update({p + "B": 1000 ** (i + 1) for i, p in enumerate(_DEC)})
_SIZE_UNITS["kB"] = 1000
_SIZE_UNITS.update({p + "iB": 1024 ** (i + 1) for i, p in enumerate(_DEC)})
_SIZE_UNITS.update({p: 1024 ** (i + 1) for i, p in enumerate(_DEC[:4])})  # nccl-tests

_RATE_UNITS: dict[str, Fraction] = {"bps": Fraction(1, 8)}
_RATE_UNITS.update({p + "bps": Fraction(1000 ** (i + 1), 8) for i, p in enumerate(_DEC[:4])})
_RATE_UNITS["b/s"] = Fraction(1, 8)
_RATE_UNITS.update({p + "b/s": Fraction(1000 ** (i + 1), 8) for i, p in enumerate(_DEC[:4])})
_RATE_UNITS.update({"kbps": Fraction(125), "kb/s": Fraction(125)})
_RATE_UNITS.update({"B/s": Fraction(1), "Bps": Fraction(1)})
_RATE_UNITS.update({p + "B/s": Fraction(1000 ** (i + 1)) for i, p in enumerate(_DEC)})
_RATE_UNITS.update({p + "Bps": Fraction(1000 ** (i + 1)) for i, p in enumerate(_DEC)})
_RATE_UNITS["kB/s"] = Fraction(1000)
_RATE_UNITS.update({p + "iB/s": Fraction(1024 ** (i + 1)) for i, p in enumerate(_DEC)})

_TIME_UNITS: dict[str, Fraction] = {
    "ns": Fraction(1, 10**9), "us": Fraction(1, 10**6), "\u00b5s": Fraction(1, 10**6),
    "\u03bcs": Fraction(1, 10**6), "ms": Fraction(1, 10**3), "s": Fraction(1)}

_NUM_RE = re.compile(r"\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(\S*)\s*\Z")
_BITS_RE = re.compile(r"(|k|[KMGTP]i?)b(ps|/s)?\Z")


def _fail(kind: str, text, what: str, reason: str) -> UnitError:
    where = f"{what}: " if what else ""
    return UnitError(f"{where}cannot parse {kind} {text!r}: {reason}")


def _split(kind: str, text, what: str) -> tuple[Fraction, str]:
    """Return (exact number, unit string); unit is "" for bare numbers."""
    if isinstance(text, bool) or not isinstance(text, (str, numbers.Real)):
        raise _fail(kind, text, what, f"expected a string or number, got {type(text).__name__}")
    if isinstance(text, str):
        if not text.strip():
            raise _fail(kind, text, what, "empty string")
        m = _NUM_RE.match(text)
        if m is None:
            raise _fail(kind, text, what, "expected a number optionally followed by a unit")
        num, unit = m.group(1), m.group(2)
    else:
        num, unit = text, ""
    try:
        if not math.isfinite(float(num)):
            raise _fail(kind, text, what, "value is not finite")
        value = Fraction(num)
    except (OverflowError, ValueError, TypeError) as exc:
        if isinstance(exc, UnitError):
            raise
        raise _fail(kind, text, what, "value is not a finite number") from None
    return value, unit


def _expected(units) -> str:
    return "expected one of: " + ", ".join(units)


def parse_size(text, what: str = "") -> int:
    """Parse a size to an integral, non-negative number of bytes.

    Bare numbers are bytes; "1.5KB" is 1500; "8G" (nccl-tests) is 8 * 2**30.
    """
    value, unit = _split("size", text, what)
    if unit:
        if unit not in _SIZE_UNITS:
            m = _BITS_RE.match(unit)
            if m:
                bits = _PREFIX_NAME[m.group(1)] + "bits" + ("/s" if m.group(2) else "")
                raise _fail("size", text, what, f"sizes are in bytes; {unit!r} is {bits}")
            raise _fail("size", text, what,
                        f"unknown unit {unit!r} ({_expected(_SIZE_UNITS)})")
        value *= _SIZE_UNITS[unit]
    if value < 0:
        raise _fail("size", text, what, "size must be non-negative")
    if value.denominator != 1:
        raise _fail("size", text, what, f"not a whole number of bytes ({float(value):g} B)")
    return int(value)


def parse_rate(text, what: str = "") -> float:
    """Parse a bandwidth to bytes/second (> 0).

    "400Gbps" and "400 Gb/s" are bits (= 50e9 B/s); "50GB/s", "50GBps" are bytes;
    "12.5 GiB/s" is binary. A bare number is bytes/s.
    """
    value, unit = _split("rate", text, what)
    if unit:
        if unit not in _RATE_UNITS:
            if unit in ("k", "K", "M", "G", "T", "P"):
                raise _fail("rate", text, what,
                            f"ambiguous unit {unit!r}: write '{unit}bps' for "
                            f"{_PREFIX_NAME[unit]}bits/s or '{unit}B/s' for "
                            f"{_PREFIX_NAME[unit]}bytes/s")
            hint = ""
            m = _BITS_RE.match(unit)
            if (m and not m.group(2)) or unit in _SIZE_UNITS:
                hint = f"; did you mean {unit + ('ps' if m else '/s')!r}?"
            raise _fail("rate", text, what,
                        f"unknown unit {unit!r} ({_expected(_RATE_UNITS)}){hint}")
        value *= _RATE_UNITS[unit]
    if value <= 0:
        raise _fail("rate", text, what, "rate must be positive")
    try:
        return float(value)
    except OverflowError:
        raise _fail("rate", text, what, "value out of range") from None


def parse_time(text, what: str = "") -> float:
    """Parse a duration (ns, us, µs, μs, ms, s; bare number = s) to seconds (>= 0)."""
    value, unit = _split("time", text, what)
    if unit:
        if unit not in _TIME_UNITS:
            raise _fail("time", text, what,
                        f"unknown unit {unit!r} ({_expected(_TIME_UNITS)})")
        value *= _TIME_UNITS[unit]
    if value < 0:
        raise _fail("time", text, what, "time must be non-negative")
    try:
        return float(value)
    except OverflowError:
        raise _fail("time", text, what, "value out of range") from None


# ---- numbers typed on a command line ---------------------------------------------------------------------------
# Every numeric option of every subcommand is range-checked by one of these, as torchrun and nccl-tests check theirs:
# a zero or negative count, rate, node or job number is an error, never silently replaced.
Bound = Optional[Union[int, Callable[[], int]]]  # a bound, or one known when the option is read (this host's cores)


def _bound(b: Bound):
    return b() if callable(b) else b


def _range_text(low, high) -> str:
    return f">= {low}" if high is None else f"from {low} to {high}"


def parse_whole(text, what: str = "", low: int = 1, high: Bound = None) -> int:
    """`text` (a string of digits, or an int) as a whole number from low to high (inclusive; high None: no upper
    bound); a UnitError naming `what` and the range otherwise."""
    high = _bound(high)
    where = f"{what}: " if what else ""
    value = text.strip() if isinstance(text, str) else text
    if isinstance(value, bool) or not (isinstance(value, numbers.Integral)
                                       or (isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value))):
        raise UnitError(f"{where}expected a whole number {_range_text(low, high)}, got {text!r}")
    n = int(value)
    if n < low or (high is not None and n > high):
        raise UnitError(f"{where}expected a whole number {_range_text(low, high)}, got {shown(n)}")
    return n


def parse_positive(text, what: str = "", high: float = math.inf) -> float:
    """`text` as a finite number > 0 (and <= high), such as 400e12; a UnitError naming `what` otherwise."""
    where = f"{what}: " if what else ""
    try:
        x = float(text.strip() if isinstance(text, str) else text)
    except (TypeError, ValueError, OverflowError):
        x = math.nan
    if isinstance(text, bool) or not 0 < x <= high or not math.isfinite(x):
        raise UnitError(f"{where}expected a finite number > 0{'' if high == math.inf else f' and <= {high:g}'}, "
                        f"got {text!r}")
    return x


def _option(parse, *bounds, why: str = ""):
    """An argparse `type=` from a parser above: its UnitError becomes argparse's usage error (exit status 2), whose
    message names the option (and says `why` the bounds are what they are)."""
    def convert(text):
        try:
            return parse(text, "", *bounds)
        except UnitError as exc:
            raise argparse.ArgumentTypeError(f"{exc}{' (' + why + ')' if why else ''}") from None
    convert.__name__ = parse.__name__.removeprefix("parse_")  # what argparse's own messages call the type
    return convert


def whole(low: int = 1, high: Bound = None, why: str = ""):
    """argparse type: a whole number from low to high."""
    return _option(parse_whole, low, high, why=why)


def positive(high: float = math.inf):
    """argparse type: a finite number > 0."""
    return _option(parse_positive, high)


def _whole_list(text, what: str = "", low: int = 1, high: Bound = None) -> tuple[int, ...]:
    parts = text.split(",") if isinstance(text, str) else [text]
    try:
        if not all(str(p).strip() for p in parts):
            raise UnitError("an empty item")
        return tuple(parse_whole(p, what, low, high) for p in parts)
    except UnitError:
        raise UnitError(f"{what + ': ' if what else ''}expected whole numbers {_range_text(low, _bound(high))}, "
                        f"separated by commas, got {text!r}") from None


def wholes(low: int = 1, high: Bound = None):
    """argparse type: comma-separated whole numbers, each from low to high (a tuple)."""
    return _option(_whole_list, low, high)


def _size_list(text, what: str = "", low: int = 1, high: Bound = None) -> list[int]:
    out = []
    for part in text.split(","):
        n = parse_size(part.strip(), what)
        if n < low or (_bound(high) is not None and n > _bound(high)):
            raise UnitError(f"{what + ': ' if what else ''}expected sizes from {format_size(low)} to "
                            f"{format_size(_bound(high))}, got {part.strip()!r}")
        out.append(n)
    return out


def sizes(low: int = 1, high: Bound = None):
    """argparse type: comma-separated sizes (8, 1K, 64MiB), each from low to high bytes (a list)."""
    return _option(_size_list, low, high)


def _trim(x: float) -> str:
    s = f"{x:.3f}".rstrip("0").rstrip(".")
    return "0" if s in ("", "-0") else s


def _scaled(x: float, base: int, names: list[str]) -> str:
    """Format x with the largest unit that keeps the value >= 1 (3 decimals)."""
    if not math.isfinite(x):
        return f"{x} {names[0]}"
    sign, x = ("-" if x < 0 else ""), abs(x)
    i = 0
    while i + 1 < len(names) and x >= base ** (i + 1):
        i += 1
    if i + 1 < len(names) and round(x / base ** i, 3) >= base:  # 1023.9996 KiB -> 1 MiB
        i += 1
    return f"{sign}{_trim(x / base ** i)} {names[i]}"


def format_size(nbytes, binary: bool = True) -> str:
    """1048576 -> "1 MiB", 1536 -> "1.5 KiB", 8 -> "8 B" (KB/MB/... if not binary).

    Rounded binary output ("1.001 GiB") is not whole bytes and won't re-parse.
    """
    if binary:
        return _scaled(nbytes, 1024, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"])
    return _scaled(nbytes, 1000, ["B", "KB", "MB", "GB", "TB", "PB"])


def format_rate(bytes_per_s) -> str:
    """50e9 -> "50 GB/s", 1.25e12 -> "1.25 TB/s" (decimal bytes/second)."""
    return _scaled(bytes_per_s, 1000, ["B/s", "KB/s", "MB/s", "GB/s", "TB/s", "PB/s"])


def format_time(seconds) -> str:
    """936.25e-9 -> "936.25 ns", 1.5e-6 -> "1.5 us", 2e-3 -> "2 ms", 3.2 -> "3.2 s"."""
    if not math.isfinite(seconds) or seconds == 0:
        return f"{seconds:g} s"
    a = abs(seconds)
    for scale, name in ((1, "s"), (1e-3, "ms"), (1e-6, "us")):
        if a >= scale or round(a / scale, 3) >= 1:
            return f"{_trim(seconds / scale)} {name}"
    if a < 1e-9:  # sub-nanosecond: keep 4 significant digits
        return f"{seconds / 1e-9:.4g} ns"
    return f"{_trim(seconds / 1e-9)} ns"
