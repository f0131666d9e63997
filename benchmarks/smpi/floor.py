"""The peer benchmark's floor: allreduce.py's numpy work alone, with nothing simulated (no simcomm).

What any simulator of that program must do with the data, done the cheapest way numpy can: the program's own work
(each rank fills its COUNT float32 with its rank number, then checks the result), and the least an all-reduce of
real data needs (every rank's array read once into one sum, the sum copied into every rank's array). The sum and
the copies are cut between the cores as simcomm cuts them (arrays.in_parts), so the floor's wall time is the least
a simulator on this machine could take. Usage: python floor.py N [COUNT] [THREADS]; prints the result as
allreduce.py does, and each phase's wall and CPU seconds on stderr.
"""
from __future__ import annotations

import os
import resource
import sys
import threading
import time

import numpy as np


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _in_threads(work, n: int, threads: int) -> None:
    """work(lo, hi) over range(n), one contiguous part per thread (numpy lets go of the GIL in its loops)."""
    cuts = [n * i // threads for i in range(threads + 1)]
    helpers = [threading.Thread(target=work, args=(cuts[i], cuts[i + 1])) for i in range(1, threads)]
    for t in helpers:
        t.start()
    work(cuts[0], cuts[1])
    for t in helpers:
        t.join()


def main(n: int, count: int, threads: int) -> float:
    marks = [("start", time.perf_counter(), _cpu())]

    def mark(phase: str) -> None:
        marks.append((phase, time.perf_counter(), _cpu()))
    xs = [np.full(count, rank, dtype=np.float32) for rank in range(n)]  # the program's own arrays
    mark("program: fill")
    out = np.empty(count, dtype=np.float32)

    def add(lo: int, hi: int) -> None:
        out[lo:hi] = xs[0][lo:hi]
        for x in xs[1:]:
            np.add(x[lo:hi], out[lo:hi], out=out[lo:hi])
    _in_threads(add, count, threads)
    mark("sum: read every array once")

    def copy(lo: int, hi: int) -> None:
        for x in xs[lo:hi]:
            x[...] = out
    _in_threads(copy, n, threads)
    mark("result into every array")
    expect = np.float32(n * (n - 1) / 2)
    wrong = sum(int(np.count_nonzero(x != expect)) for x in xs)  # the program's check
    mark("program: check")
    if wrong:
        raise AssertionError(f"{wrong} wrong values")
    for (_, t0, c0), (phase, t1, c1) in zip(marks, marks[1:]):
        print(f"{phase:<28} wall {t1 - t0:7.3f} s  cpu {c1 - c0:7.3f} s", file=sys.stderr)
    return float(xs[0][0])


if __name__ == "__main__":
    ranks = int(sys.argv[1])
    per_rank = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else max(1, min(cores, 4))
    print(f"result {main(ranks, per_rank, threads):.1f}")
