"""The workload kinds, by name. The scenario schema's `workload` union, `run_scenario`, reports and sweeps are
assembled from this list: a new kind is one module with a WORKLOAD object, listed here."""
from __future__ import annotations

from ..errors import SimcommError
from .base import Workload
from .contention import WORKLOAD as CONTENTION
from .perf import WORKLOAD as PERF
from .program import WORKLOAD as PROGRAM
from .training import WORKLOAD as TRAINING

WORKLOADS: dict[str, Workload] = {w.kind: w for w in (PERF, PROGRAM, CONTENTION, TRAINING)}


def workload(kind: str) -> Workload:
    if kind not in WORKLOADS:
        raise SimcommError(f"unknown workload kind {kind!r}; expected one of {', '.join(WORKLOADS)}")
    return WORKLOADS[kind]
