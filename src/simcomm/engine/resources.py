"""Per-device resources used in order: HBM (copies and reductions) and compute (flops).

Each device keeps the time it becomes free; an operation starts when both it is issued and the device is free,
so work queued on one device runs back to back. Vectorised: one call handles one operation on many devices.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .trace import NO_TAGS


@dataclass(eq=False)
class Hold:
    """A run of identical steps booked lazily: step j queues `amount` on `ranks` at starts[j] (see
    DeviceQueue.hold); `ends[j]`, when given, is when step j's work ends on every rank (the caller tracked the
    queue exactly). `settle(m)` books the first m steps for real; it is idempotent."""

    queue: "DeviceQueue"
    ranks: np.ndarray
    amount: np.ndarray
    starts: np.ndarray
    on_conflict: Callable[[], int]
    label: str
    tags: object
    ends: np.ndarray | None = None
    booked: int = 0
    active: bool = True

    def settle(self, steps: int) -> None:
        q = self.queue
        if self.active:
            q._holds.remove(self)
            self.active = False
        m = steps - self.booked
        if m <= 0:
            return
        work = self.amount / q.rate
        first = float(self.starts[self.booked])
        last = float(self.starts[steps - 1])
        if self.ends is not None:
            free = np.full(len(self.ranks), float(self.ends[steps - 1]))
        elif m >= 2:  # each step finds the device free (the hold's condition): the last two tell the end
            free = np.maximum(float(self.starts[steps - 2]) + work, last) + work
        else:
            free = np.maximum(q.free_at[self.ranks], last) + work
        q.free_at[self.ranks] = free
        if q.recorder is not None:
            q.recorder.step_spans(q.kind, self.ranks, first, float(free.max()), self.amount, self.label,
                                  self.tags, steps=m)
        self.booked = steps


class DeviceQueue:
    """A FIFO resource per rank with a fixed service rate (bytes/s or flop/s)."""

    def __init__(self, kind: str, num_ranks: int, rate: float, recorder=None):
        if rate <= 0:
            raise ValueError(f"{kind} rate must be positive, got {rate}")
        self.kind = kind
        self.rate = rate
        self.free_at = np.zeros(num_ranks)
        self.recorder = recorder
        self._holds: list[Hold] = []

    def use(self, ranks, amount, now: float, label: str = "", duration=None, tags=NO_TAGS,
            step: bool = False) -> np.ndarray:
        """Queue `amount` units of work on each of `ranks` (distinct) at time `now`; return finish times.

        The work takes amount / rate, or `duration` seconds when given (work whose rate the caller models, such
        as a GEMM at its shape's achieved rate); `amount` is then only recorded. `step` marks work inside a
        collective step, which "steps" detail records as an aggregate (Recorder.step_spans).
        """
        ranks = np.atleast_1d(np.asarray(ranks, dtype=np.int64))
        if self._holds:
            self._interrupt(ranks)
        amount = np.broadcast_to(np.asarray(amount, dtype=np.float64), ranks.shape)
        start = np.maximum(self.free_at[ranks], now)
        end = start + (amount / self.rate if duration is None else np.asarray(duration, dtype=np.float64))
        self.free_at[ranks] = end
        if self.recorder is not None:
            record = self.recorder.step_spans if step else self.recorder.spans
            record(self.kind, ranks, start, end, amount, label, tags)
        return end

    def hold(self, ranks, amount, starts, on_conflict: Callable[[], int], label: str = "", tags=NO_TAGS,
             ends=None) -> Hold:
        """Book `amount` on each of `ranks` at each of `starts` (ascending, each device free by then: the caller
        checks), lazily. Whoever else uses one of these ranks first calls `on_conflict()`, which must stop the
        steps and return how many of them have been issued; those are booked before the newcomer."""
        h = Hold(self, np.asarray(ranks, dtype=np.int64), np.asarray(amount, dtype=np.float64),
                 np.asarray(starts, dtype=np.float64), on_conflict, label, tags, ends)
        self._holds.append(h)
        return h

    def _interrupt(self, ranks: np.ndarray) -> None:
        for h in list(self._holds):
            mine = np.zeros(len(self.free_at), dtype=bool)
            mine[h.ranks] = True
            if mine[ranks].any():
                h.settle(h.on_conflict())


def reduction_bytes(nbytes, inputs: int = 2) -> np.ndarray:
    """HBM traffic of reducing `inputs` buffers of nbytes into one: every input read, the output written."""
    return np.asarray(nbytes, dtype=np.float64) * (inputs + 1)
