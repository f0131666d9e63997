"""Timers that land exactly on an absolute time."""
from __future__ import annotations

import numpy as np


def delay_to(now: float, when: float) -> float:
    """A delay that takes a clock at `now` to exactly `when` (now + (when - now) can round away from it by an ulp:
    a closed form that ends where its steps, timed one by one, would have ended must land there exactly)."""
    delay = max(when - now, 0.0)
    for _ in range(8):
        got = now + delay
        if got == when or delay == 0.0:
            break
        delay = float(np.nextafter(delay, np.inf if got < when else -np.inf))
    return delay
