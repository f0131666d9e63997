"""Simulated time for rank programs: `from simcomm import clock as time` makes time.sleep/time.time simulated."""
from __future__ import annotations

import math
import numbers

from ..errors import DistError
from .runtime import current


def time() -> float:
    """The simulated time in seconds."""
    return current()[0].env.now


perf_counter = monotonic = time


def sleep(seconds: float) -> None:
    """Let simulated time pass for the calling rank (other ranks run meanwhile)."""
    rt, me = current()
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not 0 <= seconds < math.inf:
        raise DistError(f"rank {me}: sleep({seconds!r}): the length must be a finite number of seconds >= 0")
    rt.wait(me, rt.env.timeout(float(seconds)), f"sleep({seconds:g} s)")


def compute(flops: float = 0.0, seconds: float = 0.0, label: str = "compute") -> None:
    """Occupy this rank's device with work: `flops` at the device's rate, plus `seconds` of fixed time."""
    rt, me = current()
    done = rt.services["session"].compute([me], flops, seconds, label=label)
    rt.wait(me, done, f"{label}({flops:g} flop)")
