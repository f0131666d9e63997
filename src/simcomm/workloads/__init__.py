"""Workloads: what a scenario runs. One module per kind (perf sweeps, rank programs, contention between groups),
each owning its spec, run, summary and report; registry.py lists them."""
from __future__ import annotations

import time

from .base import RunResult, Workload
from .contention import GroupResult, GroupSpec, run_contention
from .perf import PerfRow, expand_algorithms, run_perf
from .program import resolve_program
from .registry import WORKLOADS, workload


def run_scenario(loaded, detail: str | None = None, progress=None) -> RunResult:
    """Run a LoadedScenario's workload; `detail` overrides model.detail; `progress(done, total)` is optional."""
    spec = loaded.scenario.workload
    t0 = time.perf_counter()
    result = workload(spec.kind).run(spec, loaded.scenario, loaded.cluster, loaded.name, detail, progress)
    if result.simulation is not None:
        result.elapsed = result.simulation.now
    result.wall = time.perf_counter() - t0
    return result


def summarize(result: RunResult) -> list[dict]:
    """A few numbers per result row, for sweeps."""
    return workload(result.kind).summary(result)


def report_blocks(result: RunResult) -> list:
    """The report as blocks for report.table.render: a header naming the cluster, the workload's own blocks, and
    the simulated time."""
    d = result.cluster.describe()
    intra = d["intra_node"]
    used = workload(result.kind).ranks_used(result)
    ranks = f"{d['ranks']} ranks" if used in (None, d["ranks"]) else f"{used} of its {d['ranks']} ranks"
    head = (f"scenario {result.name}: {result.kind} on {d['name']} ({ranks} of {d['device']}; "
            f"{intra['kind']} {intra['bandwidth'] / 1e9:g} GB/s inside a node"
            + (f", {d['inter_node']['bandwidth'] / 1e9:g} GB/s NICs over {d['inter_node']['fabric']}"
               if d["nodes"] > 1 else "") + ")")
    stats = result.simulation.stats() if result.simulation is not None else {}
    tail = (f"simulated {result.elapsed * 1e6:.2f} us in {result.wall:.2f} s wall ({stats.get('events', 0)} events)"
            + "".join(f"\nnote: {n}" for n in result.notes))
    return [head, *workload(result.kind).report(result), tail]


def plots_for(result: RunResult, requested) -> list[str]:
    """The requested plots that apply to this result's workload kind."""
    return [p for p in requested if p in workload(result.kind).plots]


__all__ = ["WORKLOADS", "GroupResult", "GroupSpec", "PerfRow", "RunResult", "Workload", "expand_algorithms",
           "plots_for", "report_blocks", "resolve_program", "run_contention", "run_perf",
           "run_scenario", "summarize", "workload"]
