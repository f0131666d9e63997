"""What the floor's fill costs in page faults, page size by page size: N arrays of COUNT float32 filled as the rank
programs fill them (np.full), each way of backing them with pages in a fresh process, interleaved run by run.

- plain: 4 KiB pages only (numpy's huge-page advice off, NUMPY_MADVISE_HUGEPAGE=0), as `bench smpi` runs both sides.
- numpy-thp: numpy's default: every array of 4 MiB or more is its own glibc mmap (4 MiB and a header page, not
  2 MiB-aligned) advised MADV_HUGEPAGE, so about half of it can be 2 MiB pages.
- region-thp: all arrays views of one private anonymous mapping, 2 MiB-aligned and advised MADV_HUGEPAGE before
  anything touches it: every page can be a 2 MiB page, the most any allocator could get.
- region-populate: the same region of 4 KiB pages, all faulted in by the kernel in one call (MAP_POPULATE), then
  filled: the faults without a trap each.
- reused-plain, reused-thp: plain and numpy-thp, measured on a second round of arrays after the first round was
  freed in the same process (memory this process has already faulted in once).

With transparent huge pages in `madvise` mode a 2 MiB page costs one fault instead of 512. Whether that is cheaper
depends on the machine: inside a virtual machine whose host takes back free guest memory (free page reporting,
balloons), a fresh 2 MiB page is first faulted in on the host, 4 KiB at a time, and can cost more than the 512
small faults it replaces; memory that was touched a moment ago is cheap again (the reused rows tell them apart).
Usage: python pages.py N [COUNT] [REPEATS]; prints one row per way: the fill's median wall and CPU seconds (and the
kernel's part), the MB held in 2 MiB pages and the peak resident MB.
"""
from __future__ import annotations

import json
import mmap
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

WAYS = ("plain", "numpy-thp", "region-thp", "region-populate", "reused-plain", "reused-thp")
_HUGE = 2 << 20


def _full(n: int, count: int) -> list[np.ndarray]:
    return [np.full(count, rank, dtype=np.float32) for rank in range(n)]


def _in_region(n: int, count: int, populate: bool) -> list[np.ndarray]:
    """The same arrays as views of one private mapping: 2 MiB-aligned and advised MADV_HUGEPAGE, or (populate)
    of 4 KiB pages all faulted in by the kernel in one call (MAP_POPULATE) before the fill."""
    size = n * count * 4
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | (mmap.MAP_POPULATE if populate else 0)
    region = mmap.mmap(-1, size + _HUGE, flags=flags)
    raw = np.frombuffer(region, dtype=np.uint8)  # the views keep the mapping alive
    skip = -raw.ctypes.data % _HUGE
    if not populate:
        try:
            region.madvise(mmap.MADV_HUGEPAGE, skip, size)
        except OSError:  # a kernel without transparent huge pages: the row then shows none
            pass
    data = raw[skip:skip + size].view(np.float32)
    xs = [data[rank * count:(rank + 1) * count] for rank in range(n)]
    for rank, x in enumerate(xs):
        x[...] = rank
    return xs


def _huge_mb() -> float:
    try:
        with open("/proc/self/smaps_rollup") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("AnonHugePages")) / 1024
    except (OSError, StopIteration):
        return 0.0


def _timed(make, n: int, count: int) -> tuple[list[np.ndarray], dict]:
    usage0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    xs = make(n, count)
    usage1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    system = usage1.ru_stime - usage0.ru_stime
    return xs, {"wall": t1 - t0, "cpu": usage1.ru_utime - usage0.ru_utime + system, "system": system}


def child(way: str, n: int, count: int) -> dict:
    """One way, in this (fresh) process: the fill's times (allocation included), its MB in 2 MiB pages, the peak
    MB; an error where the system lacks what the way needs (the region ways: Linux's MADV_HUGEPAGE, MAP_POPULATE)."""
    if way.startswith("region") and not hasattr(mmap, "MADV_HUGEPAGE" if way == "region-thp" else "MAP_POPULATE"):
        return {"way": way, "error": "not on this system"}
    make = (lambda n, count: _in_region(n, count, way == "region-populate")) if way.startswith("region") else _full
    xs, times = _timed(make, n, count)
    if way.startswith("reused"):
        del xs
        xs, times = _timed(make, n, count)
    if any(x[-1] != rank for rank, x in enumerate(xs)):
        raise AssertionError("a fill went wrong")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"way": way, **times, "huge_mb": _huge_mb(), "peak_mb": peak}


def _run(way: str, n: int, count: int) -> dict:
    plain = way.endswith(("plain", "populate"))
    env = {**os.environ, "NUMPY_MADVISE_HUGEPAGE": "0" if plain else "1"}
    done = subprocess.run([sys.executable, __file__, "--child", way, str(n), str(count)], env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main(n: int, count: int, repeats: int) -> list[dict]:
    runs = {way: [] for way in WAYS}
    for _ in range(repeats):  # interleaved
        for way in WAYS:
            runs[way].append(_run(way, n, count))
    rows = []
    for way, results in runs.items():
        if "error" in results[0]:
            rows.append(results[0])
            continue
        rows.append({"way": way, **{key: statistics.median(r[key] for r in results)
                                    for key in ("wall", "cpu", "system", "huge_mb", "peak_mb")}})
    return rows


def _print(rows: list[dict], n: int, count: int) -> None:
    print(f"{n} arrays x {count * 4 / 2**20:g} MiB, filled (medians)")
    print(f"{'way':<17}{'wall s':>8}{'cpu s':>8}{'system s':>10}{'2 MiB pages MB':>16}{'peak MB':>9}")
    for r in rows:
        if "error" in r:
            print(f"{r['way']:<17}{r['error']}")
        else:
            print(f"{r['way']:<17}{r['wall']:8.3f}{r['cpu']:8.3f}{r['system']:10.3f}{r['huge_mb']:16.0f}"
                  f"{r['peak_mb']:9.0f}")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        ranks = int(sys.argv[1])
        per_rank = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
        _print(main(ranks, per_rank, int(sys.argv[3]) if len(sys.argv) > 3 else 3), ranks, per_rank)
