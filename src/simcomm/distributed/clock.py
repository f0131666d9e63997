"""Simulated time for rank programs: `from simcomm import clock as time` makes time.sleep/time.time simulated.

Also where a rank program labels its work: `with clock.tagged(stage=1, microbatch=3, phase="forward"):` adds
structured tags to every compute span, point-to-point transfer and collective the rank starts inside the block
(a collective keeps the tags on which all its members agree), so traces and reports can group by them.
"""
from __future__ import annotations

import math
import numbers
from contextlib import contextmanager
from typing import Mapping

from ..engine import NO_TAGS
from ..errors import DistError
from .runtime import current


def time() -> float:
    """The simulated time in seconds."""
    return current()[0].env.now


perf_counter = monotonic = time


def sleep(seconds: float) -> None:
    """Let simulated time pass for the calling rank (other ranks run meanwhile)."""
    rt, me = current()
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not 0 <= seconds < math.inf:
        raise DistError(f"rank {me}: sleep({seconds!r}): the length must be a finite number of seconds >= 0")
    length = _float(seconds)
    _finite_end(me, f"sleep({_shown(seconds)})", rt.env.now, length)
    rt.wait(me, rt.env.timeout(length), f"sleep({length:g} s)")


def _float(x) -> float:
    try:
        return float(x)
    except OverflowError:  # a whole number beyond any float
        return math.inf


def _shown(x) -> str:
    """A number as a message shows it, bounded (a whole number beyond any float by its size)."""
    return repr(_float(x)) if _float(x) < math.inf else f"<a {int(x).bit_length()}-bit whole number>"


def _finite_end(me: int, call: str, start: float, length: float) -> None:
    """Refuse work that would end at a time that is not finite (each length may be finite, their sum not)."""
    end = start + length
    if not end < math.inf:
        raise DistError(f"rank {me}: {call} starting at t={start!r} s would end at t={end!r} s; simulated time "
                        "must stay finite")


def current_tags() -> Mapping:
    """The tags the calling rank's operations carry now (set by `tagged`)."""
    rt, me = current()
    return rt.tags.get(me, NO_TAGS)


@contextmanager
def tagged(**tags):
    """Tag every operation the calling rank starts inside the block (nested blocks add to the outer tags)."""
    rt, me = current()
    outer = rt.tags.get(me, NO_TAGS)
    rt.tags[me] = {**outer, **tags}
    try:
        yield
    finally:
        rt.tags[me] = outer


def compute(flops: float = 0.0, seconds: float = 0.0, label: str = "compute", tags: Mapping | None = None,
            wait: bool = True) -> None:
    """Occupy this rank's device with work: `flops` at the device's rate, plus `seconds` of fixed time. The span
    carries the rank's current tags plus `tags`.

    wait=False queues the work as a GPU stream does (the program goes on at once): the rank's later compute runs
    after it, and every collective or send the rank starts waits for it, as NCCL kernels wait on the compute
    stream. `synchronize()` waits for it (torch.cuda.synchronize)."""
    rt, me = current()
    amounts = (flops, seconds)
    if all(isinstance(x, numbers.Real) and not isinstance(x, bool) and 0 <= x < math.inf for x in amounts):
        device = rt.sim.compute  # the work starts when the device is free (after this rank's queued compute)
        length = _float(flops) / device.rate + _float(seconds)
        _finite_end(me, f"compute(flops={_shown(flops)}, seconds={_shown(seconds)})",
                    max(rt.env.now, float(device.free_at[me])), length)
    all_tags = {**rt.tags.get(me, NO_TAGS), **(tags or {})}
    done = rt.services["session"].compute([me], flops, seconds, label=label, tags=all_tags)
    if wait:
        rt.wait(me, done, f"{label}({flops:g} flop)")
    else:
        rt.queued[me] = done


def synchronize() -> None:
    """Wait until the compute this rank queued (clock.compute(wait=False)) has run."""
    rt, me = current()
    for op in rt.device_busy(me):
        rt.wait(me, op, "synchronize (queued compute)")
