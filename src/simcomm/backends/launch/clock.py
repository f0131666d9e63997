"""time.sleep / time.time and friends on the simulated clock, for rank threads (real time elsewhere).

A rank's program sees one clock, the simulated one: its sleeps let simulated time pass and its clock reads return
it, so every run gives the same times. What waits for the world outside the simulator keeps the real clock, in a
rank too: the standard library's code that waits for a child process, a socket, a pipe or another thread
(REAL_TIME_PACKAGES: subprocess's wait loop, asyncio's event loop, concurrent.futures, multiprocessing, ...). Its
timeouts count real seconds, as the thing it waits for takes real time, and that waiting costs no simulated time:
`subprocess.run(["sleep", "0.5"])` takes half a real second and no simulated one (mixing the two clocks made its
polling loop charge tens of simulated seconds, a different number on every run).
"""
from __future__ import annotations

import sys
import time as _time

from .context import RankContext, current_context
from .dist import blocking

_REAL = {name: getattr(_time, name) for name in ("sleep", "time", "time_ns", "perf_counter", "perf_counter_ns",
                                                  "monotonic", "monotonic_ns")}
# Top-level packages whose calls to time.* wait for real things (processes, sockets, threads, event loops).
REAL_TIME_PACKAGES = frozenset({"subprocess", "asyncio", "selectors", "socket", "ssl", "multiprocessing",
                                "concurrent", "threading", "queue", "sched"})


def _rank() -> RankContext | None:
    """The calling rank's context when the caller of the time function is on the simulated clock, else None."""
    ctx = current_context()
    if ctx is None:
        return None
    caller = sys._getframe(2).f_globals.get("__name__") or ""
    return None if caller.partition(".")[0] in REAL_TIME_PACKAGES else ctx


def _now(ctx) -> float:
    """Simulated seconds since the rank's world started, after charging its queued compute."""
    from ...distributed import clock
    with blocking(ctx):
        return clock.time()


def sleep(seconds) -> None:
    ctx = _rank()
    if ctx is None:
        return _REAL["sleep"](seconds)
    from ...distributed import clock
    with blocking(ctx):
        clock.sleep(seconds)


def time() -> float:
    ctx = _rank()
    return _REAL["time"]() if ctx is None else ctx.world.epoch + _now(ctx)


def time_ns() -> int:
    ctx = _rank()
    return _REAL["time_ns"]() if ctx is None else int(round((ctx.world.epoch + _now(ctx)) * 1e9))


def perf_counter() -> float:
    ctx = _rank()
    return _REAL["perf_counter"]() if ctx is None else ctx.world.perf_epoch + _now(ctx)


def perf_counter_ns() -> int:
    ctx = _rank()
    return _REAL["perf_counter_ns"]() if ctx is None else int(round((ctx.world.perf_epoch + _now(ctx)) * 1e9))


def monotonic() -> float:
    ctx = _rank()
    return _REAL["monotonic"]() if ctx is None else ctx.world.perf_epoch + _now(ctx)


def monotonic_ns() -> int:
    ctx = _rank()
    return _REAL["monotonic_ns"]() if ctx is None else int(round((ctx.world.perf_epoch + _now(ctx)) * 1e9))


REPLACEMENTS = {"sleep": sleep, "time": time, "time_ns": time_ns, "perf_counter": perf_counter,
                "perf_counter_ns": perf_counter_ns, "monotonic": monotonic, "monotonic_ns": monotonic_ns}
