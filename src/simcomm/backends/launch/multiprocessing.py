"""torch.multiprocessing (and multiprocessing) for scripts that launch their own ranks.

`spawn(fn, args, nprocs, join, daemon, start_method)` runs fn(i, *args) for i < nprocs as a new simulated world,
at once, and returns when every rank has finished (join=False returns a context whose join() is already done).
`Process(target=..., args=...)`: start() registers the process; the first join() (or is_alive(), exitcode) of any
started process runs every process started so far as one world, rank i being the i-th started. Each rank gets its
own deep copy of args and a copy of the parent's os.environ, as a child process would; module globals are shared
(as after fork). The parent's simulated clock waits for the world, as a parent waiting on its children.
"""
from __future__ import annotations

import copy
import multiprocessing as _mp
import sys
import traceback

from .context import current_context
from .dist import blocking
from .world import World, parent_context

_STATE: dict = {}  # set by the active launch: "new_world" (callable), "start_method"


def _copy(args):
    try:
        return copy.deepcopy(args)
    except Exception:  # noqa: BLE001 - objects that cannot be copied are shared, as threads must
        return args


def _run_world(kind: str, targets: list, environs: list) -> World:
    """Run targets[i]() as rank i of a new world from inside a launched rank; the parent waits for it."""
    parent = parent_context()
    world: World = _STATE["new_world"](kind, len(targets), environs, parent.main_module)
    with blocking(parent):
        try:
            world.run(lambda rank: targets[rank]())
        finally:
            from ...distributed import clock
            if world.result is not None and world.result.elapsed > 0:
                clock.sleep(world.result.elapsed)
    return world


class _DoneContext:
    """What spawn(join=False) returns: the processes have already finished."""

    def __init__(self, world: World):
        self.world = world
        self.processes = []

    def join(self, timeout=None) -> bool:
        return True

    def pids(self) -> list[int]:
        return list(range(self.world.nprocs))


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """torch.multiprocessing.spawn on the simulator."""
    if current_context() is None:
        return _STATE["originals"]["spawn"](fn, args, nprocs, join, daemon, start_method)
    env = parent_context().environ
    targets = [(lambda i=i, a=_copy(tuple(args)): fn(i, *a)) for i in range(nprocs)]
    world = _run_world("spawn", targets, [dict(env) for _ in range(nprocs)])
    return None if join else _DoneContext(world)


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

    def target_of(p):
        def run():
            try:
                p.run()
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise
        return run

    try:
        _run_world("process", [target_of(p) for p in procs], [p._environ for p in procs])
    except Exception:  # noqa: BLE001 - a child's failure is printed, as multiprocessing prints it
        sys.stderr.write(f"Process failed (simulated world of {len(procs)} processes):\n{traceback.format_exc()}")
        for p in procs:
            p._exitcode = 1
        _STATE["failures"].append(sys.exc_info()[1])
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
