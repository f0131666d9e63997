"""time.sleep / time.time and friends on the simulated clock, for rank threads (real time elsewhere)."""
from __future__ import annotations

import time as _time

from .context import current_context
from .dist import blocking

_REAL = {name: getattr(_time, name) for name in ("sleep", "time", "time_ns", "perf_counter", "perf_counter_ns",
                                                  "monotonic", "monotonic_ns")}


def _now(ctx) -> float:
    """Simulated seconds since the rank's world started, after charging its queued compute."""
    from ...distributed import clock
    with blocking(ctx):
        return clock.time()


def sleep(seconds) -> None:
    ctx = current_context()
    if ctx is None:
        return _REAL["sleep"](seconds)
    from ...distributed import clock
    with blocking(ctx):
        clock.sleep(seconds)


def time() -> float:
    ctx = current_context()
    return _REAL["time"]() if ctx is None else ctx.world.epoch + _now(ctx)


def time_ns() -> int:
    ctx = current_context()
    return _REAL["time_ns"]() if ctx is None else int(round((ctx.world.epoch + _now(ctx)) * 1e9))


def perf_counter() -> float:
    ctx = current_context()
    return _REAL["perf_counter"]() if ctx is None else ctx.world.perf_epoch + _now(ctx)


def perf_counter_ns() -> int:
    ctx = current_context()
    return _REAL["perf_counter_ns"]() if ctx is None else int(round((ctx.world.perf_epoch + _now(ctx)) * 1e9))


def monotonic() -> float:
    return perf_counter() if current_context() is not None else _REAL["monotonic"]()


def monotonic_ns() -> int:
    return perf_counter_ns() if current_context() is not None else _REAL["monotonic_ns"]()


REPLACEMENTS = {"sleep": sleep, "time": time, "time_ns": time_ns, "perf_counter": perf_counter,
                "perf_counter_ns": perf_counter_ns, "monotonic": monotonic, "monotonic_ns": monotonic_ns}
