"""What every workload kind provides, and what running one produces.

A workload kind is one module (perf.py, program.py, contention.py, ...) that owns its scenario spec (a pydantic
model with a `kind` literal), its cross-checks against the built cluster, how it runs, a summary for sweeps and
its report. registry.py lists them; the scenario schema, `run_scenario`, the report and the sweep are assembled
from that list, so adding a kind means writing its module and listing it there.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


# error(path, message) -> an exception naming the scenario file, line and key path (the scenario layer builds it)
ErrorAt = Callable[[tuple, str], Exception]


@dataclass
class RunResult:
    """What running a scenario produced: rows for the report, the simulation (timeline) and a summary."""

    name: str
    kind: str
    cluster: object
    rows: list = field(default_factory=list)  # the workload's row records (or dicts)
    simulation: Any = None
    elapsed: float = 0.0  # simulated seconds
    wall: float = 0.0  # seconds the simulation took to run
    notes: list = field(default_factory=list)
    details: dict = field(default_factory=dict)  # more JSON, under its own keys (e.g. "step" for training)
    plot_data: dict = field(default_factory=dict)  # plot name -> what the report's renderer of that plot takes
    # which simulated rank each rank's per-rank trace is made from (report/kineto.py), where the workload simulated
    # some GPUs for others; None: every rank that ran something has its own records
    copies: Any = None

    @property
    def timeline(self) -> list:
        return self.activities()

    def activities(self, kernels: bool = False) -> list:
        """The simulation's records (`kernels`: down to the kernels of blocks that are made of them)."""
        return self.simulation.recorder.activities(kernels) if self.simulation is not None else []

    def about_ranks(self, activities) -> dict:
        """{rank: what the report says of it} for the per-rank traces (report/kineto.py), read off `activities`."""
        return {}

    def row_dicts(self) -> list[dict]:
        return [r if isinstance(r, dict) else r.as_dict() for r in self.rows]


class Workload:
    """A workload kind. Subclasses set `kind`, `Spec` and `plots`, and implement run, summary and report."""

    kind: str = ""
    Spec: type = type(None)
    plots: tuple[str, ...] = ("timeline", "links")  # which of the report's PNG plots apply

    def reference_sections(self) -> list[tuple[str, type]]:
        """(title, model) sections of the scenario reference this kind contributes."""
        return [(f"workload (kind: {self.kind})", self.Spec)]

    def check(self, spec, scenario, cluster, error: ErrorAt) -> None:
        """Cross-checks that need the built cluster (ranks that fit, algorithms that can run); raise error(...)."""

    def run(self, spec, scenario, cluster, name: str, detail: str | None, progress=None) -> RunResult:
        raise NotImplementedError

    def summary(self, result: RunResult) -> list[dict]:
        """A few numbers per result row for parameter sweeps."""
        raise NotImplementedError

    def report(self, result: RunResult) -> list:
        """Report blocks for report.table.render: text, or (title, headers, rows) tables."""
        raise NotImplementedError

    def ranks_used(self, result: RunResult) -> int | None:
        """How many of the cluster's ranks the run used, where fewer than all may be (None: all)."""
        return None


def forced_algorithm(model, kind: str) -> str | None:
    """The algorithm model.algorithm forces for collective `kind` (a per-kind entry, else '*'), or None."""
    forced = model.algorithm or {}
    return forced.get(kind, forced.get("*"))
