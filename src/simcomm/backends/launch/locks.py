"""threading.Lock and threading.RLock made while a launch runs: locks that wait in simulated time.

Ranks are threads of one process and share the modules the script imports, so a lock in such a module is shared by
the ranks. A rank that holds a real lock while it waits in simulated time (`with LOCK: time.sleep(1)`) would block
the next rank that wants it outside the simulator, and the run would stop for good. These locks know which rank holds
them: a rank that finds one held by another rank of its run waits for its release in the simulator (a wait the
deadlock report names), with its timeout in simulated seconds; anywhere else (a thread that is not a rank, a holder
that is not a rank of the same run) they are ordinary locks. Condition, Semaphore, Event, Barrier and queue.Queue
made during the launch build on them. Locks made before the launch are real (distributed/watchdog.py reports a rank
blocked on one).
"""
from __future__ import annotations

import _thread
import functools
import sys
import threading
from pathlib import Path

from ...distributed.runtime import calling_rank


_HERE = Path(__file__).resolve()
_PACKAGE = str(_HERE.parents[2])
_REAL_LOCK, _REAL_RLOCK = _thread.allocate_lock, threading.RLock


@functools.lru_cache(maxsize=None)
def _kind(filename: str) -> str:
    """'machinery' for this module, threading and queue (they ask for locks on their caller's behalf), 'simcomm' for
    simcomm's other modules, else 'user'."""
    path = Path(filename).resolve()
    if path == _HERE or path.stem in ("threading", "queue"):
        return "machinery"
    return "simcomm" if str(path).startswith(_PACKAGE) else "user"


def _maker():
    """The frame that asked for the lock: the first outside this module and threading/queue (a Condition, Event or
    Queue asks for its lock in its constructor)."""
    f = sys._getframe(2)
    while f is not None and _kind(f.f_code.co_filename) == "machinery":
        f = f.f_back
    return f


def _simulated(maker) -> bool:
    """Whether a lock asked for by `maker` waits in simulated time: asked for by a rank, by its program's code
    (simcomm's own locks, its batons among them, stay real)."""
    return maker is not None and calling_rank() is not None and _kind(maker.f_code.co_filename) == "user"


def Lock():  # noqa: N802 - threading's name
    """threading.Lock during a launch."""
    maker = _maker()
    return SimLock(maker) if _simulated(maker) else _REAL_LOCK()


def RLock(*args, **kwargs):  # noqa: N802 - threading's name
    """threading.RLock during a launch."""
    maker = _maker()
    return SimRLock(maker) if _simulated(maker) else _REAL_RLOCK(*args, **kwargs)


class SimLock:
    """threading.Lock with simulated waiting between ranks (see the module docstring)."""

    def __init__(self, maker=None):
        self._real = _thread.allocate_lock()
        self._holder = None  # (runtime, rank) of the rank holding it, None if free or held by another thread
        self._waiters: list = []  # simpy events of ranks waiting for the release
        self._made_at = f"{Path(maker.f_code.co_filename).name}:{maker.f_lineno}" if maker else "?"

    def _free(self) -> bool:
        """Take the real lock if it is free."""
        if self._real.acquire(False):
            self._holder = calling_rank()
            return True
        return False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._free():
            return True
        if not blocking:
            return False
        here, holder = calling_rank(), self._holder
        if here is None or holder is None or holder[0] is not here[0] or here[0].aborted:
            if self._real.acquire(True, timeout):  # an ordinary wait: the holder is a running thread
                self._holder = here
                return True
            return False
        return self._wait(here, timeout)

    def _wait(self, here, timeout: float) -> bool:
        """Wait in simulated time until the lock is free (or timeout simulated seconds have passed)."""
        rt, me = here
        env = rt.env
        deadline = None if timeout is None or timeout < 0 else env.now + timeout
        while True:
            released = env.event()
            self._waiters.append(released)
            holder = self._holder
            what = (f"acquire of a lock (made at {self._made_at}) held by rank {holder[1]}" if holder
                    else f"acquire of a lock (made at {self._made_at})")
            rt.wait(me, released if deadline is None else env.any_of([released, env.timeout(deadline - env.now)]),
                    what)
            if self._free():
                return True
            if deadline is not None and env.now >= deadline:
                return False

    def release(self) -> None:
        holder, self._holder = self._holder, None
        try:
            self._real.release()
        except RuntimeError:
            self._holder = holder
            raise
        self._wake()

    def _wake(self) -> None:
        """Let ranks waiting for the lock try again, if the releasing thread may touch their simulation (a rank of
        their run, which holds the baton)."""
        here = calling_rank()
        waiters, keep = [], []
        for ev in self._waiters:
            (waiters if here is not None and ev.env is here[0].env else keep).append(ev)
        self._waiters = keep
        for ev in waiters:
            if not ev.triggered:
                ev.succeed()

    def locked(self) -> bool:
        return self._real.locked()

    def _at_fork_reinit(self) -> None:
        self._real = _thread.allocate_lock()
        self._holder, self._waiters = None, []

    __enter__ = acquire

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<simcomm launch lock made at {self._made_at}, {'locked' if self.locked() else 'unlocked'}>"


class SimRLock(SimLock):
    """threading.RLock with simulated waiting between ranks: re-entrant for the thread that holds it."""

    def __init__(self, maker=None):
        super().__init__(maker)
        self._owner: int | None = None
        self._count = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me = _thread.get_ident()
        if self._owner == me:
            self._count += 1
            return True
        if not super().acquire(blocking, timeout):
            return False
        self._owner, self._count = me, 1
        return True

    __enter__ = acquire

    def release(self) -> None:
        if self._owner != _thread.get_ident():
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if not self._count:
            self._owner = None
            super().release()

    # what threading.Condition uses when its lock has them
    def _is_owned(self) -> bool:
        return self._owner == _thread.get_ident()

    def _release_save(self):
        state = (self._owner, self._count)
        self._count = 1
        self.release()
        return state

    def _acquire_restore(self, state) -> None:
        super().acquire()
        self._owner, self._count = state

    def _recursion_count(self) -> int:
        return self._count if self._owner == _thread.get_ident() else 0

    def _at_fork_reinit(self) -> None:
        super()._at_fork_reinit()
        self._owner, self._count = None, 0


def patches() -> list[tuple[object, str, object]]:
    """(owner, name, replacement) for the launch's Patcher."""
    return [(threading, "Lock", Lock), (threading, "RLock", RLock)]
