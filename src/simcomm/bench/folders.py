"""Where the benchmark programs live: the source tree's benchmarks/ (a clone; the folder is not part of the wheel)."""
from __future__ import annotations

from pathlib import Path


def benchmark_folder(name: str, marker: str) -> Path:
    """benchmarks/NAME of the source tree simcomm runs from (the first one above this file holding `marker`)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "benchmarks" / name
        if (candidate / marker).exists():
            return candidate
    raise FileNotFoundError(f"benchmarks/{name}/ ({marker}) was not found above {here}: run simcomm bench from a "
                            "clone of the repository")
