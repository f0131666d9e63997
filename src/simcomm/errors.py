"""simcomm's one error tree: every error a user can cause is a SimcommError (the CLI prints it without a traceback).

Messages name what is wrong and where: the ranks involved and what each was doing, or the key, value and unit.
"""
from __future__ import annotations

import numbers
import traceback
from pathlib import Path

_PACKAGE = str(Path(__file__).resolve().parent)


def shown(value, width: int = 80) -> str:
    """A value as an error message shows it: a whole number beyond 64 bits by its size, anything else by its repr,
    cut to `width` characters."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value).bit_length() > 64:
        return f"a {int(value).bit_length()}-bit whole number"
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def user_traceback(exc: BaseException) -> str:
    """`Traceback (most recent call last): ...` for exc, from the user's own first frame down (simcomm's frames
    above it, its rank and thread machinery, left out), as the program's own process would print it."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, f in enumerate(frames) if not str(Path(f.filename).resolve()).startswith(_PACKAGE)), 0)
    return ("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames[first:]))
            + "".join(traceback.format_exception_only(exc)))


class SimcommError(Exception):
    """Base of simcomm's user-facing errors (the CLI prints these without a traceback)."""


class SettingError(SimcommError):
    """A setting that cannot work; `field` is the one to change (None: no single one), so a scenario's error names
    the key without reading the message."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class DistError(SimcommError, ValueError):
    """Invalid use of the distributed API (bad rank, bad argument), mirroring torch.distributed's ValueErrors."""


class DeadlockError(SimcommError):
    """Ranks wait on each other and nothing in flight can wake them. `waiting` maps rank -> what it waits for."""

    def __init__(self, message: str, waiting: dict[int, str]):
        super().__init__(message)
        self.waiting = waiting


class MismatchError(SimcommError):
    """Ranks disagree about a communication: different collectives, shapes, dtypes, ops or roots, or a
    send whose size or dtype differs from its recv."""


class RankFailed(SimcommError):
    """A rank's program raised; the original exception is chained as __cause__."""

    def __init__(self, rank: int, exc: BaseException):
        super().__init__(f"rank {rank} raised {type(exc).__name__}: {exc}")
        self.rank = rank
        self.original = exc


class AlgorithmError(SimcommError, ValueError):
    """A collective cannot run as asked: unsupported op/dtype, unknown algorithm or protocol, bad sizes."""


class UnitError(SimcommError, ValueError):
    """A size, rate or time could not be parsed."""


class HardwareError(SimcommError, ValueError):
    """A hardware description is inconsistent (unknown vertex, missing link, bad figure)."""


class OutOfMemoryError(SimcommError):
    """A training layout needs more device memory than the GPU has. Names the GPU, its capacity, what it needs and
    the largest consumers (`consumers`: category -> bytes, largest first)."""

    def __init__(self, message: str, rank: int, capacity: float, needed: float, consumers: dict[str, float]):
        super().__init__(message)
        self.rank = rank
        self.capacity = capacity
        self.needed = needed
        self.consumers = consumers
