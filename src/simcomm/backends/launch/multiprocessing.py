"""torch.multiprocessing (and multiprocessing) for scripts that launch their own ranks.

`spawn(fn, args, nprocs, join, daemon, start_method)` runs fn(i, *args) for i < nprocs as a new simulated world,
at once, and returns when every rank has finished (join=False returns a context whose join() is already done).
`Process(target=..., args=...)`: start() registers the process; the first join() (or is_alive(), exitcode) of any
started process runs every process started so far as one world, rank i being the i-th started. Each rank gets its
own deep copy of args and a copy of the parent's os.environ, as a child process would; module globals are shared
(as after fork). The parent's simulated clock waits for the world, as a parent waiting on its children.

A child that raises or exits with a non-zero status fails as a real child process does: spawn's join raises torch's
ProcessRaisedException (with the child's traceback) or ProcessExitedException (with its exit code) in the parent,
which may catch it; a Process gets that exit code (1 for an exception, whose traceback is printed as multiprocessing
prints it). The rest of the world is stopped then (torch's join terminates the other processes): their exit code is
-SIGTERM. A failure of the simulation itself (a deadlock, a mismatch) is not a child's and fails the parent as is.
"""
from __future__ import annotations

import copy
import multiprocessing as _mp
import signal
import sys

from ...errors import RankFailed, user_traceback
from .context import current_context
from .dist import blocking
from .world import World, parent_context

_STATE: dict = {}  # set by the active launch: "new_world" (callable), "start_method"
TERMINATED = -signal.SIGTERM  # the exit code of a process stopped because another one failed


class ChildExit(Exception):
    """A child process ended with sys.exit(status), status not 0."""

    def __init__(self, status: int):
        super().__init__(f"exited with status {status}")
        self.status = status


def _child(target):
    """target() as a child process's main: sys.exit(0) ends it normally, another status is a ChildExit (a message
    given to sys.exit is printed and is status 1, as Python does)."""
    def main():
        try:
            target()
        except SystemExit as exc:
            if exc.code in (None, 0):
                return
            if not isinstance(exc.code, int):
                sys.stderr.write(f"{exc.code}\n")
            raise ChildExit(exc.code if isinstance(exc.code, int) else 1) from None
    return main


def _copy(args):
    try:
        return copy.deepcopy(args)
    except Exception:  # noqa: BLE001 - objects that cannot be copied are shared, as threads must
        return args


def _run_world(kind: str, targets: list, environs: list) -> World:
    """Run targets[i]() as rank i of a new world from inside a launched rank; the parent waits for it (until it
    ended, or failed). A child's failure is raised as a RankFailed (see _status for its exit code)."""
    parent = parent_context()
    world: World = _STATE["new_world"](kind, len(targets), environs, parent.main_module)
    mains = [_child(t) for t in targets]
    with blocking(parent):
        try:
            world.run(lambda rank: mains[rank]())
        finally:
            from ...distributed import clock
            elapsed = world.elapsed if world.result is not None else getattr(world.error, "simulated_time", 0.0)
            if elapsed > 0:
                clock.sleep(elapsed)
    return world


def _status(exc: BaseException) -> int | None:
    """The exit code of the child whose failure `exc` is (None: not a child's failure but the simulation's)."""
    if not isinstance(exc, RankFailed) or exc.original is None:
        return None
    return exc.original.status if isinstance(exc.original, ChildExit) else 1


class _DoneContext:
    """What spawn(join=False) returns: the processes have already finished."""

    def __init__(self, world: World):
        self.world = world
        self.processes = []

    def join(self, timeout=None) -> bool:
        return True

    def pids(self) -> list[int]:
        return list(range(self.world.nprocs)) if self.world is not None else []


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """torch.multiprocessing.spawn on the simulator."""
    if current_context() is None:
        return _STATE["originals"]["spawn"](fn, args, nprocs, join, daemon, start_method)
    env = parent_context().environ
    targets = [(lambda i=i, a=_copy(tuple(args)): fn(i, *a)) for i in range(nprocs)]
    if not targets:  # torch starts no process and returns at once
        return None if join else _DoneContext(None)
    try:
        world = _run_world("spawn", targets, [dict(env) for _ in range(nprocs)])
    except RankFailed as exc:
        raise _torch_exception(exc) from None
    return None if join else _DoneContext(world)


def _torch_exception(exc: RankFailed) -> BaseException:
    """What torch.multiprocessing's join raises in the parent for the child failure `exc`."""
    from torch.multiprocessing import ProcessExitedException, ProcessRaisedException
    status = _status(exc)
    if status is None:
        return exc
    if isinstance(exc.original, ChildExit):
        return ProcessExitedException(f"process {exc.rank:d} terminated with exit code {status:d}", exc.rank,
                                      exc.rank, status)
    return ProcessRaisedException(f"\n\n-- Process {exc.rank:d} terminated with the following error:\n"
                                  + user_traceback(exc.original), exc.rank, exc.rank)


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    return spawn(fn, args, nprocs, join, daemon, start_method)


def _pending() -> list:
    """Processes the calling rank has started but not yet run (each parent keeps its own)."""
    ctx = parent_context()
    if not hasattr(ctx, "started"):
        ctx.started = []
    return ctx.started


class Process:
    """multiprocessing.Process inside a launched rank: a rank of the next simulated world."""

    _next_pid = 1000

    def __new__(cls, *args, **kwargs):
        if current_context() is None:
            return _STATE["originals"]["Process"](*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, group=None, target=None, name=None, args=(), kwargs=None, *, daemon=None):
        self._target, self._args, self._kwargs = target, tuple(args), dict(kwargs or {})
        Process._next_pid += 1
        self.pid = None
        self.name = name or f"Process-{Process._next_pid - 1000}"
        self.daemon = bool(daemon)
        self._exitcode = None
        self._environ = None
        self._pid = Process._next_pid

    def start(self) -> None:
        if self._environ is not None:
            raise AssertionError("cannot start a process twice")
        self._environ = dict(parent_context().environ)
        self._args, self._kwargs = _copy(self._args), _copy(self._kwargs)
        self.pid = self._pid
        _pending().append(self)

    def run(self) -> None:
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    def _finish(self) -> None:
        if self._exitcode is None and self in _pending():
            _run_pending()

    def join(self, timeout=None) -> None:
        self._finish()

    def is_alive(self) -> bool:
        self._finish()
        return False

    @property
    def exitcode(self):
        self._finish()
        return self._exitcode

    def terminate(self) -> None:
        pass

    kill = terminate

    def close(self) -> None:
        pass


def _run_pending() -> None:
    pending = _pending()
    procs = list(pending)
    pending.clear()

    try:
        _run_world("process", [p.run for p in procs], [p._environ for p in procs])
    except RankFailed as exc:
        status = _status(exc)
        if status is None:
            raise
        failed = procs[exc.rank]
        if not isinstance(exc.original, ChildExit):  # as multiprocessing prints a process's uncaught exception
            sys.stderr.write(f"Process {failed.name}:\n{user_traceback(exc.original)}")
        finished = getattr(exc, "finished", ())
        for i, p in enumerate(procs):
            p._exitcode = status if p is failed else 0 if i in finished else TERMINATED
        return
    for p in procs:
        p._exitcode = 0


class _Context:
    """multiprocessing.get_context(...) inside a launch: Process is simulated, the rest is the real context's."""

    def __init__(self, method=None):
        self._real = _STATE["originals"]["get_context"](method)
        self.Process = Process

    def __getattr__(self, name):
        return getattr(self._real, name)


def get_context(method=None):
    return _Context(method) if current_context() is not None else _STATE["originals"]["get_context"](method)


def set_start_method(method, force=False) -> None:
    if current_context() is None:
        return _STATE["originals"]["set_start_method"](method, force)
    _STATE["start_method"] = method


def get_start_method(allow_none=False):
    if current_context() is None:
        return _STATE["originals"]["get_start_method"](allow_none)
    return _STATE.get("start_method") or (None if allow_none else _mp.get_start_method(allow_none=True) or "fork")


REPLACEMENTS = {"spawn": spawn, "start_processes": start_processes, "Process": Process, "get_context": get_context,
                "set_start_method": set_start_method, "get_start_method": get_start_method}
