"""Runs one ordinary (blocking) function per rank against the simulated clock.

Each rank keeps its own call stack (a greenlet, or an OS thread: see execution.py), but only one runs at a time: a
baton passes between the scheduler and the ranks, so runs are deterministic. A rank runs at the current simulated
time until it blocks on an event (a recv, a collective, a sleep); the scheduler then advances the simulation until
some blocked rank's event fires. If every live rank is blocked and no event is pending, nothing can ever wake
them: that is a deadlock, reported with what each waits for.

A rank that polls (Work.is_completed() returning False) yields too: it runs again once the simulation has taken
one more step, so a polling loop lets time advance, and polling for what can never happen is a deadlock.

Once the run is aborted (an error in any rank), every call into the runtime raises at once, so cleanup code
(`finally: dist.barrier()`) cannot hold the run up.
"""
from __future__ import annotations

import sys
from collections import deque
from contextvars import ContextVar

from ..errors import DeadlockError, RankFailed, SimcommError
from .execution import EXECUTIONS, default_execution, make
from .watchdog import Watchdog, user_frame, where

# (runtime, rank) of the running rank program; each greenlet and each thread has its own context.
_current: ContextVar = ContextVar("simcomm_rank", default=None)


class _Aborted(BaseException):
    """Unwinds a rank thread when the run is aborted (BaseException so user `except Exception` can't catch it)."""


def current():
    """(runtime, rank) of the calling rank program; a clear error outside one."""
    here = _current.get()
    if here is None:
        raise SimcommError("simcomm.distributed was called outside a simulated rank program: "
                           "run the function with simcomm.spawn(fn, nprocs=N)")
    if here[0].aborted:
        raise _Aborted()
    return here


def calling_rank():
    """(runtime, rank) of the calling rank program, or None outside one."""
    return _current.get()


class RankRuntime:
    """Ranks (greenlets or threads, see execution.py), one baton, and the simulation they share."""

    def __init__(self, sim, nprocs: int, execution: str | None = None):
        self.sim = sim
        self.env = sim.env
        self.nprocs = nprocs
        execution = execution or default_execution()
        if execution not in EXECUTIONS:
            raise SimcommError(f"execution must be one of {', '.join(EXECUTIONS)}, got {execution!r}")
        self.execution = execution
        self.parent = _current.get()  # (runtime, rank) of the rank that started this run, if a rank did
        self._ranks = make(execution, nprocs, Watchdog(self._describe_waiting, self.parent is not None))
        self._ready: deque[int] = deque()
        self._polling: dict[int, object] = {}  # rank -> what it polls for; resumed after the next step
        self.waiting: dict[int, str] = {}
        self._handling: dict[int, BaseException] = {}  # rank -> exception it was handling when it blocked
        self.finished: dict[int, float] = {}
        self.results: list = [None] * nprocs
        self._error: BaseException | None = None
        self.aborted = False
        self.services: dict[str, object] = {}  # p2p matcher, collective rendezvous, groups: set up by dist
        self.tags: dict[int, dict] = {}  # rank -> tags its operations carry now (clock.tagged)
        self.queued: dict[int, object] = {}  # rank -> its last compute queued without waiting (clock.compute)

    def device_busy(self, rank: int) -> list:
        """The queued compute a communication started by `rank` must wait for ([] if its device is idle)."""
        op = self.queued.get(rank)
        if op is None or op.processed:
            self.queued.pop(rank, None)
            return []
        return [op]

    # ---- called from ranks --------------------------------------------------------------------------------
    def _block(self, rank: int) -> None:
        self._ranks.hand_back(rank)
        if self.aborted:
            raise _Aborted()

    def wait(self, rank: int, event, what):
        """Block rank until event fires; `what` (text, or a callable giving it) is used in deadlock reports.
        An event that failed raises its error in this rank."""
        if self.aborted:
            raise _Aborted()
        if not event.processed:
            self.waiting[rank] = what
            self._note_handling(rank)
            event.callbacks.append(lambda _e, r=rank: self._ready.append(r))
            self._block(rank)
            self.waiting.pop(rank, None)
        if not event.ok:
            raise event.value
        return event.value

    def poll(self, rank: int, event, what) -> bool:
        """Whether event has fired; if not, let the simulation take a step first (a polling rank spins)."""
        if self.aborted:
            raise _Aborted()
        if event.processed:
            return True
        self.waiting[rank] = what
        self._polling[rank] = what
        self._note_handling(rank)
        self._block(rank)
        self.waiting.pop(rank, None)
        return event.processed

    def handling(self, rank: int) -> BaseException | None:
        """The exception rank is handling (cleanup code in except/finally): the calling rank's own now, a blocked
        rank's when it blocked."""
        if _current.get() == (self, rank):
            return sys.exc_info()[1]
        return self._handling.get(rank) if rank in self.waiting else None

    def _note_handling(self, rank: int) -> None:
        """Remember the exception rank is handling while it blocks (cleanup code in except/finally), for reports."""
        exc = sys.exc_info()[1]
        if exc is None:
            self._handling.pop(rank, None)
        else:
            self._handling[rank] = exc

    def fail(self, error: BaseException) -> None:
        """Abort the whole run with error (raised from the calling rank, reported by spawn)."""
        if self._error is None:
            self._error = error
        raise _Aborted()

    # ---- scheduler ------------------------------------------------------------------------------------------
    def run(self, fn, args=()) -> list:
        try:
            self._ranks.start(lambda r: self._main(r, fn, args))
        except RuntimeError as exc:  # the OS refused another thread
            self._abort()
            raise SimcommError(f"could not start {self.nprocs} rank threads ({self._ranks.started} started: {exc}); "
                               "simulate fewer ranks") from None
        self._ready.extend(range(self.nprocs))
        try:
            while True:
                while self._ready and self._error is None:
                    try:
                        self._ranks.turn(self._ready.popleft())
                    except DeadlockError as exc:  # the watchdog: a rank blocked outside the simulator
                        self._error = exc
                if self._error is not None:
                    raise self._error
                if len(self.finished) == self.nprocs:
                    break
                if self.env.peek() == float("inf"):
                    raise self._deadlock()
                self.env.step()
                if self._polling:  # spinning ranks look again after every step
                    self._ready.extend(sorted(self._polling))
                    self._polling.clear()
            self.env.run()  # let in-flight work no rank waited for (an unwaited isend) finish
        finally:
            self._abort()
        return self.results

    def _main(self, rank: int, fn, args) -> None:
        token = _current.set((self, rank))
        try:
            if not self.aborted:
                self.results[rank] = fn(rank, *args)
                for op in self.device_busy(rank):  # a rank ends when the compute it queued has run
                    self.wait(rank, op, "compute queued before the end of the program")
                self.finished[rank] = self.env.now
        except _Aborted:
            pass
        except SimcommError as exc:
            if self._error is None:
                if not str(exc).startswith("rank "):  # say who made the mistake, keep the error's type
                    exc.args = (f"rank {rank}: {exc}",) + exc.args[1:]
                self._error = exc
        except KeyboardInterrupt as exc:  # Ctrl-C while this rank ran: stop the run as a whole
            if self._error is None:
                self._error = exc
        except BaseException as exc:  # noqa: BLE001 - any user failure aborts the run, reported with its rank
            if self._error is None:
                self._error = RankFailed(rank, exc)
                self._error.__cause__ = exc
        finally:
            _current.reset(token)

    def _abort(self) -> None:
        """Unwind every unfinished rank: each raises _Aborted where it waits (and at any later call into the
        runtime), so its cleanup code runs and cannot hold the run up."""
        self.aborted = True
        self._ranks.stop(_Aborted, [r for r in range(self.nprocs) if r not in self.finished])

    def _describe_waiting(self) -> dict[int, str]:
        """rank -> what it waits for in the simulator and where its program is (for the watchdog's report)."""
        frames = self._ranks.frames()
        return {r: f"waits in {w() if callable(w) else w}"
                + (f" at {where(user_frame(frames[r]))}" if r in frames else "")
                for r, w in sorted(self.waiting.items())}

    def _deadlock(self) -> DeadlockError:
        waiting = {r: (w() if callable(w) else w) for r, w in sorted(self.waiting.items())}
        parts = [f"rank {r} {'polls is_completed() on' if r in self._polling else 'waits in'} {what}"
                 + (f" (while handling {type(self._handling[r]).__name__}: {self._handling[r]})"
                    if r in self._handling else "") for r, what in waiting.items()]
        done = sorted(self.finished)
        if done:
            parts.append(f"rank{'s' if len(done) > 1 else ''} {', '.join(map(str, done))} "
                         f"{'have' if len(done) > 1 else 'has'} finished")
        msg = (f"deadlock at t={self.env.now * 1e6:.3f} us: every live rank is blocked and nothing is in flight: "
               + "; ".join(parts))
        return DeadlockError(msg, waiting)
