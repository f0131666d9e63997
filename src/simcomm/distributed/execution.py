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
from time import monotonic as _monotonic  # the real clock, whatever a launch patches into the time module
from typing import Callable

from . import watchdog as _watchdog

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
    """Ranks as OS threads, one semaphore each, and the baton; a Watchdog (if given) looks at a rank that keeps the
    baton long (see watchdog.py)."""

    def __init__(self, nprocs: int, watchdog: _watchdog.Watchdog | None = None):
        self.nprocs = nprocs
        self._resume = [threading.Semaphore(0) for _ in range(nprocs)]
        self._baton = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self.watchdog = watchdog

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
        """Run rank until it hands back; raises DeadlockError if the watchdog finds it blocked for good."""
        self._resume[rank].release()
        if self.watchdog is None:
            self._baton.acquire()
            return
        self.watchdog.start(rank)
        while not self._baton.acquire(timeout=_watchdog.WATCH_S):
            self.watchdog.tick(rank, self._threads[rank])

    def frames(self) -> dict:
        """rank -> its thread's innermost frame (ranks whose thread runs)."""
        frames = sys._current_frames()
        return {r: frames[t.ident] for r, t in enumerate(self._threads) if t.ident in frames}

    def hand_back(self, rank: int) -> None:
        self._baton.release()
        self._resume[rank].acquire()

    def stop(self, unwind: type[BaseException], unfinished: list[int]) -> None:
        """Wake every unfinished rank (the runtime makes it raise `unwind` at once) and let the threads end."""
        for r in unfinished:
            self._resume[r].release()
        deadline = _monotonic() + _JOIN_S
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - _monotonic()))


def make(execution: str, nprocs: int, watchdog: _watchdog.Watchdog | None = None):
    return Greenlets(nprocs) if execution == "greenlet" else Threads(nprocs, watchdog)
