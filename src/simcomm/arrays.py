"""numpy helpers every layer may use.

`unique` is np.unique(x) by sorting: numpy 2's np.unique without inverse or counts hashes, which on 10^6 distinct
integers took 1.9 s where a sort takes 0.02 s (numpy 2.4).

`in_parts` spreads memory-bound numpy work (a rank program's reductions and result copies over gigabytes) over the
machine's cores: numpy lets go of the GIL inside its loops, so the parts run at once. One core reads or writes
about 9 GB/s here (1,024 ranks x 4 MiB: 0.45 s to sum, 0.46 s to copy the result back) and two cores nearly twice
that; the CPU time stays the same, the wall time halves."""
from __future__ import annotations

import contextvars
import os
import threading

import numpy as np

PARALLEL_BYTES = 64 << 20  # less work than this runs in the calling thread (a thread costs ~0.1 ms to start)
MAX_THREADS = 4  # past a few cores memory bandwidth, not cores, bounds a copy or a sum


def unique(x) -> np.ndarray:
    """The sorted distinct values of an integer array (flattened), as np.unique(x) gives them."""
    s = np.sort(np.asarray(x).reshape(-1))
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def filled(value, shape, dtype=np.float64) -> np.ndarray:
    """A new array of `shape` holding `value` (a scalar, or an array that broadcasts to it): np.broadcast_to(value,
    shape).copy() without broadcast_to's cost (a few microseconds) in the common scalar case."""
    if np.ndim(value) == 0:
        return np.full(shape, value, dtype=dtype)
    return np.broadcast_to(np.asarray(value, dtype=dtype), shape).copy()


def threads() -> int:
    """Threads for memory-bound numpy work: the cores this process may use, at most MAX_THREADS; the environment
    variable SIMCOMM_THREADS sets it (1: everything in the calling thread)."""
    wanted = os.environ.get("SIMCOMM_THREADS", "")
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


def in_parts(work, n: int, nbytes: int) -> None:
    """work(lo, hi) over [lo, hi) ranges that cover range(n), one contiguous range per thread when the whole moves
    at least PARALLEL_BYTES, else work(0, n). The parts must be independent (disjoint outputs), so that how the
    range was cut never changes a result. The calling thread does the first part; the first error is raised."""
    parts = min(threads(), n) if nbytes >= PARALLEL_BYTES else 1
    if parts <= 1:
        work(0, n)
        return
    cuts = [n * i // parts for i in range(parts + 1)]
    errors: list[BaseException] = []

    def part(lo: int, hi: int) -> None:
        try:
            work(lo, hi)
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            errors.append(exc)

    # Each helper runs in a copy of the caller's context, so numpy's error state (np.errstate) is the caller's.
    helpers = [threading.Thread(target=contextvars.copy_context().run, args=(part, cuts[i], cuts[i + 1]),
                                name="simcomm-numpy", daemon=True) for i in range(1, parts)]
    for t in helpers:
        t.start()
    part(cuts[0], cuts[1])
    for t in helpers:
        t.join()
    if errors:
        raise errors[0]
