"""Per-device resources used in order: HBM (copies and reductions) and compute (flops).

Each device keeps the time it becomes free; an operation starts when both it is issued and the device is free,
so work queued on one device runs back to back. Vectorised: one call handles one operation on many devices.
"""
from __future__ import annotations

import numpy as np

from .trace import NO_TAGS


class DeviceQueue:
    """A FIFO resource per rank with a fixed service rate (bytes/s or flop/s)."""

    def __init__(self, kind: str, num_ranks: int, rate: float, recorder=None):
        if rate <= 0:
            raise ValueError(f"{kind} rate must be positive, got {rate}")
        self.kind = kind
        self.rate = rate
        self.free_at = np.zeros(num_ranks)
        self.recorder = recorder

    def use(self, ranks, amount, now: float, label: str = "", duration=None, tags=NO_TAGS) -> np.ndarray:
        """Queue `amount` units of work on each of `ranks` (distinct) at time `now`; return finish times.

        The work takes amount / rate, or `duration` seconds when given (work whose rate the caller models, such
        as a GEMM at its shape's achieved rate); `amount` is then only recorded.
        """
        ranks = np.atleast_1d(np.asarray(ranks, dtype=np.int64))
        amount = np.broadcast_to(np.asarray(amount, dtype=np.float64), ranks.shape)
        start = np.maximum(self.free_at[ranks], now)
        end = start + (amount / self.rate if duration is None else np.asarray(duration, dtype=np.float64))
        self.free_at[ranks] = end
        if self.recorder is not None:
            self.recorder.spans(self.kind, ranks, start, end, amount, label, tags)
        return end


def reduction_bytes(nbytes, inputs: int = 2) -> np.ndarray:
    """HBM traffic of reducing `inputs` buffers of nbytes into one: every input read, the output written."""
    return np.asarray(nbytes, dtype=np.float64) * (inputs + 1)

