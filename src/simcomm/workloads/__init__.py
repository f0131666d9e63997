"""Workloads: the perf sweep, rank programs, contention between groups, and parameter grids over scenarios."""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field

from ..engine import Simulation
from .contention import GroupResult, GroupSpec, run_contention
from .perf import PerfRow, expand_algorithms, run_perf

AUTO_FLOWS_MAX_RANKS = 64  # model.detail: auto records every flow up to this many ranks


@dataclass
class RunResult:
    """What running a scenario produced: rows for the report, the simulation (timeline) and a summary."""

    name: str
    kind: str  # "perf", "program" or "contention"
    cluster: object
    rows: list = field(default_factory=list)  # PerfRow, GroupResult, or dicts per rank for programs
    simulation: Simulation | None = None
    elapsed: float = 0.0  # simulated seconds
    wall: float = 0.0  # seconds the simulation took to run
    notes: list = field(default_factory=list)

    @property
    def timeline(self) -> list:
        return self.simulation.recorder.activities() if self.simulation is not None else []

    def row_dicts(self) -> list[dict]:
        return [r if isinstance(r, dict) else r.as_dict() for r in self.rows]


def _detail(detail: str, ranks: int) -> str:
    return detail if detail != "auto" else ("flows" if ranks <= AUTO_FLOWS_MAX_RANKS else "steps")


def _sizes(spec) -> list[int]:
    from ..collective import sizes_between
    return list(spec) if isinstance(spec, list) else sizes_between(spec.begin, spec.end, spec.factor)


def resolve_program(spec: str):
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func)


def run_scenario(loaded, detail: str | None = None, progress=None) -> RunResult:
    """Run a LoadedScenario's workload; `detail` overrides model.detail; `progress(done, total)` is optional."""
    s, cluster, w = loaded.scenario, loaded.cluster, loaded.scenario.workload
    forced = s.model.algorithm or {}
    result = RunResult(loaded.name, w.kind, cluster)
    t0 = time.perf_counter()
    if w.kind == "perf":
        n = w.ranks or cluster.num_ranks
        sim = Simulation(cluster, _detail(detail or s.model.detail, n))
        sizes = _sizes(w.sizes)
        algos = w.algorithms or ([forced.get("*")] if "*" in forced else None)
        per_kind = {k: (algos or [forced.get(k, "auto")]) for k in w.collectives}
        total = sum(len(expand_algorithms(per_kind[k], k)) for k in w.collectives) * len(sizes)
        done = [0]

        def tick():
            done[0] += 1
            if progress:
                progress(done[0], total)
        for kind in w.collectives:
            if not expand_algorithms(per_kind[kind], kind):
                result.notes.append(f"{kind}: none of {', '.join(per_kind[kind])} is available; skipped")
            result.rows += run_perf(sim, [kind], sizes, ranks=n, dtype=w.dtype, op=w.op, root=w.root,
                                    algorithms=per_kind[kind], protocol=s.model.protocol, progress=tick,
                                    notes=result.notes)
    elif w.kind == "program":
        from ..distributed.spawn import spawn
        n = w.ranks or cluster.num_ranks
        algorithm = forced.get("*", forced or None)
        res = spawn(resolve_program(w.program), tuple(w.args), n, cluster, algorithm=algorithm,
                    protocol=s.model.protocol, numerics=s.model.numerics, detail=_detail(detail or s.model.detail, n))
        sim = res.simulation
        comm = {r: 0.0 for r in range(n)}
        for a in res.timeline:
            if a.kind == "collective" and a.rank in comm:
                comm[a.rank] += a.end - a.start
        result.rows = [{"rank": r, "device": cluster.rank_name(r), "finish": res.finish_times[r],
                        "collective_time": comm[r], "result": res.results[r]} for r in range(n)]
    else:
        groups = [GroupSpec(g.name or f"group{i}", list(g.ranks), g.collective, g.size, g.dtype, g.op, g.root,
                            g.start, g.algorithm or forced.get(g.collective, forced.get("*")),
                            g.protocol or s.model.protocol) for i, g in enumerate(w.groups)]
        n = len({r for g in groups for r in g.ranks})
        result.rows, sim = run_contention(cluster, groups, _detail(detail or s.model.detail, n), w.baseline)
    result.simulation, result.elapsed = sim, sim.now
    result.wall = time.perf_counter() - t0
    return result


def summarize(result: RunResult) -> list[dict]:
    """A few numbers per collective (perf), per group (contention) or per run (program), for sweeps."""
    if result.kind == "perf":
        out, by = [], {}
        for r in result.rows:
            by.setdefault((r.collective, r.requested), []).append(r)
        for (kind, requested), rows in by.items():
            last = rows[-1]
            out.append({"collective": kind, "algorithm": requested, "size": last.size, "time": last.time,
                        "busbw": last.busbw, "peak_busbw": max(r.busbw for r in rows)})
        return out
    if result.kind == "contention":
        return [{"group": g.name, "collective": g.collective, "size": g.size, "time": g.time, "alone": g.alone,
                 "slowdown": g.slowdown, "busbw": g.busbw} for g in result.rows]
    return [{"ranks": len(result.rows), "elapsed": result.elapsed,
             "collective_time": max((r["collective_time"] for r in result.rows), default=0.0)}]


__all__ = ["GroupResult", "GroupSpec", "PerfRow", "RunResult", "expand_algorithms", "resolve_program", "run_contention",
           "run_perf", "run_scenario", "summarize"]
