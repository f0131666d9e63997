"""How rank programs take turns: one baton, passed between the scheduler and the ranks.

A rank runs until it blocks (a recv, a collective, a sleep), then hands the baton back; only one runs at a time,
so runs are deterministic. Each rank's call stack is kept while it waits, in one of two ways:
- greenlets (the default): a switch costs about a microsecond and a rank a few kilobytes, so 16,384 ranks start
  and take turns in well under a second;
- OS threads: for programs whose libraries keep per-thread state, such as torch's grad mode, autocast and
  dispatch-mode stacks, which every rank must have to itself (`simcomm launch` runs torch scripts this way). A
  hand-off between threads costs a wake-up by the OS: tens of microseconds, milliseconds on a loaded machine.
Both give the same results and simulated times; only the speed differs.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable

EXECUTIONS = ("greenlet", "thread")
_JOIN_S = 2.0  # after an abort, how long all rank threads together may take to unwind


def default_execution() -> str:
    """$SIMCOMM_EXECUTION if set; else greenlet, unless torch is loaded (its per-thread state needs a thread per
    rank) or greenlet is missing."""
    chosen = os.environ.get("SIMCOMM_EXECUTION", "").strip().lower()
    if chosen:
        return chosen
    if "torch" in sys.modules:
        return "thread"
    try:
        import greenlet  # noqa: F401
    except ImportError:  # pragma: no cover - greenlet is a dependency; a broken install still runs
        return "thread"
    return "greenlet"


class Greenlets:
    """Ranks as greenlets of the scheduler's thread."""

    def __init__(self, nprocs: int):
        import greenlet
        self._greenlet = greenlet
        self.nprocs = nprocs
        self._ranks: list = []
        self._scheduler = None

    def start(self, main: Callable[[int], None]) -> None:
        self._scheduler = self._greenlet.getcurrent()
        self._ranks = [self._greenlet.greenlet(lambda r=r: main(r), parent=self._scheduler)
                       for r in range(self.nprocs)]

    def turn(self, rank: int) -> None:
        """Run rank until it blocks or ends (scheduler side)."""
        self._ranks[rank].switch()

    def hand_back(self, rank: int) -> None:
        """Give the baton back and wait for the next turn (rank side)."""
        self._scheduler.switch()

    def stop(self, unwind: type[BaseException], unfinished: list[int]) -> None:
        """Raise `unwind` in every rank that started and has not ended, so its cleanup code runs."""
        for r in unfinished:
            g = self._ranks[r]
            if g:  # started and not dead
                g.throw(unwind)


class Threads:
    """Ranks as OS threads, one semaphore each, and the baton."""

    def __init__(self, nprocs: int):
        self.nprocs = nprocs
        self._resume = [threading.Semaphore(0) for _ in range(nprocs)]
        self._baton = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []

    def start(self, main: Callable[[int], None]) -> None:
        """Start a waiting thread per rank; raises RuntimeError (after cleaning up) if the OS refuses one."""
        def body(rank: int) -> None:
            self._resume[rank].acquire()
            try:
                main(rank)
            finally:
                self._baton.release()

        old = threading.stack_size()
        threading.stack_size(4 << 20)  # thousands of ranks must fit; user code rarely recurses deeply
        try:
            for r in range(self.nprocs):
                t = threading.Thread(target=body, args=(r,), daemon=True, name=f"simcomm-rank-{r}")
                t.start()
                self._threads.append(t)
        finally:
            threading.stack_size(old)

    @property
    def started(self) -> int:
        return len(self._threads)

    def turn(self, rank: int) -> None:
        self._resume[rank].release()
        self._baton.acquire()

    def hand_back(self, rank: int) -> None:
        self._baton.release()
        self._resume[rank].acquire()

    def stop(self, unwind: type[BaseException], unfinished: list[int]) -> None:
        """Wake every unfinished rank (the runtime makes it raise `unwind` at once) and let the threads end."""
        for r in unfinished:
            self._resume[r].release()
        deadline = time.monotonic() + _JOIN_S
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))


def make(execution: str, nprocs: int):
    return Greenlets(nprocs) if execution == "greenlet" else Threads(nprocs)
