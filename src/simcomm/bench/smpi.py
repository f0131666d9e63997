"""The peer comparison: the same 4 MiB all-reduce program on SimGrid's SMPI and as a simcomm rank program, beside
its floor: the program's numpy work with nothing simulated (floor.py).

The sides run as fresh processes (whole-process wall time, start-up included, as a user would see it), interleaved
run by run so that a noisy machine slows them alike; each process's peak memory comes from the kernel (wait4).
The programs and the platform generator live in the repository's benchmarks/smpi/: allreduce.c (built with
smpicc), allreduce.py (the same program for simcomm), floor.py (its data work alone) and star_platform.py (N hosts
on one switch, 50 GB/s, 1 us per host link). Runs only where smpirun and smpicc are installed (Debian:
libsimgrid-dev).
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .folders import benchmark_folder
from .process import run_process

RANKS = (8, 64, 256, 1024, 4096)
COUNT = 1 << 20  # float32 elements: 4 MiB per rank


def fitting_count(ranks: int, count: int, available: float | None = None) -> int:
    """`count` float32 per rank, halved until both programs fit in half the memory available now: the C side
    keeps two buffers per rank (SMPI runs every rank in one process), simcomm one per rank and the result. At
    4,096 ranks 4 MiB each would be 32 GiB for SMPI."""
    if available is None:
        available = _available_bytes()
    while count > 1 and 2 * ranks * count * 4 > available / 2:
        count //= 2
    return count


def _available_bytes() -> float:
    try:
        with open("/proc/meminfo") as fh:
            info = dict(line.split(":", 1) for line in fh)
        return float(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return float("inf")


def missing_tools() -> list[str]:
    return [tool for tool in ("smpicc", "smpirun") if shutil.which(tool) is None]


# Both programs allocate their buffers as plain pages: the C program mallocs them; numpy would also advise huge
# pages (madvise) for arrays of 4 MiB and more, and with transparent huge pages in "madvise" mode (as here) a page
# fault then compacts memory first, which after the other side's 2 GB run can stall the first touch for a second.
_PLAIN_PAGES = {**os.environ, "NUMPY_MADVISE_HUGEPAGE": "0"}


def _compiled(tmp: Path) -> dict:
    """The simcomm side's environment: plain pages, and Python's compiled modules (.pyc) kept in the run's own
    folder and written by a warm-up run, as an installed package has them. Without it, where
    PYTHONDONTWRITEBYTECODE is set (as in this team's environment), every run compiled the ~75 simcomm modules it
    imports from source first: 0.2 s of CPU that no user pays."""
    env = {**_PLAIN_PAGES, "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _measure(cmd: list[str], cwd: Path, timeout: float, env: dict | None = None) -> dict:
    """Run one side once: wall seconds, peak MB, and what the program printed (simulated seconds, result)."""
    done = run_process(cmd, cwd, timeout, env=env)
    lines = [line.split() for line in done.out.splitlines() if line.startswith(("simulated_seconds", "result"))]
    if done.returncode != 0 or not lines:
        return {"ok": False, "error": done.failure}
    said = dict(zip(lines[-1][::2], lines[-1][1::2]))  # the floor simulates nothing: a result, no time
    return {"ok": True, "wall_seconds": done.wall_seconds, "peak_mb": done.peak_mb, "cpu_seconds": done.cpu_seconds,
            "simulated_seconds": float(said["simulated_seconds"]) if "simulated_seconds" in said else None,
            "result": float(said["result"])}


def compare(ranks=RANKS, repeats: int = 3, count: int = COUNT, timeout: float = 600.0, progress=None) -> list[dict]:
    """One row per rank count: median wall seconds, CPU seconds and peak MB of each side (simcomm, smpi, floor),
    simcomm's and the floor's ratios to SMPI, simulated times, and the bytes per rank (`count` float32, or fewer
    where the machine's memory cannot hold both sides: fitting_count)."""
    missing = missing_tools()
    if missing:
        raise FileNotFoundError(f"{' and '.join(missing)} not found: install SimGrid (Debian: libsimgrid-dev)")
    folder = benchmark_folder("smpi", "allreduce.c")
    sys.path.insert(0, str(folder))
    from star_platform import write_platform  # noqa: E402  (the benchmark folder's generator)
    rows = []
    with tempfile.TemporaryDirectory(prefix="simcomm-smpi-") as tmp:
        tmp = Path(tmp)
        binary = tmp / "allreduce"
        subprocess.run(["smpicc", "-O2", str(folder / "allreduce.c"), "-o", str(binary)], check=True,
                       capture_output=True)
        compiled = _compiled(tmp)
        run_process([sys.executable, str(folder / "allreduce.py"), "8", "1"], tmp, timeout, env=compiled)  # warm-up
        for n in ranks:
            xml, hosts = write_platform(n, tmp)
            per_rank = fitting_count(n, count)
            smpi = ["smpirun", "-np", str(n), "-platform", str(xml), "-hostfile", str(hosts),
                    "--cfg=smpi/host-speed:1Gf", str(binary), str(per_rank)]
            ours = [sys.executable, str(folder / "allreduce.py"), str(n), str(per_rank)]
            floor = [sys.executable, str(folder / "floor.py"), str(n), str(per_rank)]
            runs = {"simcomm": [], "smpi": [], "floor": []}
            for _ in range(repeats):  # interleaved
                for side, cmd in (("simcomm", ours), ("smpi", smpi), ("floor", floor)):
                    runs[side].append(_measure(cmd, tmp, timeout, None if side == "smpi" else compiled))
                    if progress:
                        progress(f"{side} {n} ranks: {runs[side][-1].get('wall_seconds', float('nan')):.2f} s")
            rows.append({**_summarise(n, runs), "bytes_per_rank": 4 * per_rank})
    return rows


def _summarise(n: int, runs: dict) -> dict:
    row = {"ranks": n}
    for side, results in runs.items():
        good = [r for r in results if r.get("ok")]
        if not good:
            row[f"{side}_error"] = results[-1].get("error", "failed")
            continue
        row[f"{side}_wall_seconds"] = statistics.median(r["wall_seconds"] for r in good)
        row[f"{side}_peak_mb"] = statistics.median(r["peak_mb"] for r in good)
        row[f"{side}_cpu_seconds"] = statistics.median(r["cpu_seconds"] for r in good)
        if good[0]["simulated_seconds"] is not None:
            row[f"{side}_simulated_us"] = good[0]["simulated_seconds"] * 1e6
        row[f"{side}_result"] = good[0]["result"]
    for side, prefix in (("simcomm", ""), ("floor", "floor_")):
        if f"{side}_wall_seconds" in row and "smpi_wall_seconds" in row:
            row[f"{prefix}wall_ratio"] = row[f"{side}_wall_seconds"] / row["smpi_wall_seconds"]
            row[f"{prefix}memory_ratio"] = row[f"{side}_peak_mb"] / row["smpi_peak_mb"]
            row[f"{prefix}cpu_ratio"] = row[f"{side}_cpu_seconds"] / max(row["smpi_cpu_seconds"], 1e-9)
    return row
