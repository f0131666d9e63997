"""Cross-checks shared by workload kinds: ranks that fit the cluster, algorithms that exist and can run here."""
from __future__ import annotations

import numpy as np

from ..algorithms import ALGORITHMS, choose
from ..collective import make_collective
from ..errors import SimcommError
from ..vocab import COLLECTIVES, did_you_mean
from .base import ErrorAt


def available(kind: str) -> list[str]:
    return sorted(ALGORITHMS.get(kind, {}))


def check_algorithm(name: str, kinds, path, error: ErrorAt) -> None:
    """`name` must be an algorithm, available for each of `kinds`."""
    if name == "auto":
        return
    every = sorted({a for k in COLLECTIVES for a in available(k)})
    if name not in every:
        raise error(path, f"expected an algorithm, one of: auto, {', '.join(every)}{did_you_mean(name, every)}, "
                          f"found {name!r}")
    missing = [k for k in kinds if name not in available(k)]
    if missing:
        raise error(path, f"algorithm {name!r} is not available for {', '.join(missing)} "
                          f"(available: {'; '.join(f'{k}: ' + ', '.join(available(k)) for k in missing)})")


def check_runs(name: str, kind: str, ranks, root: int, cluster, path, error: ErrorAt) -> None:
    """Ask the tuner whether a forced algorithm can run this group here (nvls needs NVLink SHARP, ...)."""
    if name in ("auto", "all") or name not in available(kind):
        return
    try:
        choose(cluster, make_collective(kind, np.asarray(ranks), 1 << 20, "float32", "SUM", root), name, None)
    except (SimcommError, ValueError) as exc:
        raise error(path, f"{name} cannot run {kind} here: {exc}") from None


def check_ranks(n: int, cluster, path, error: ErrorAt) -> None:
    if n > cluster.num_ranks:
        raise error(path, f"expected at most {cluster.num_ranks} ranks ({cluster.name} has "
                          f"{cluster.num_ranks}), found {n}")
