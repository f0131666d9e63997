"""Contention: several groups' collectives started together on one simulation, so they share links and NICs.

Each group can also run alone on a fresh simulation of the same cluster; the ratio is the slowdown contention causes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Annotated, Literal

from pydantic import Field, field_validator

from ..algorithms import choose
from ..collective import make_collective
from ..fields import MAX_RANKS, Base, CollectiveName, DType, Op, Protocol, Size, Time, described
from ..session import CollectiveRecord, Session
from ..units import format_size
from .base import RunResult, Workload, forced_algorithm
from ..engine import resolve_detail
from .checks import check_algorithm, check_runs


# ---- the spec ----------------------------------------------------------------------------------------------
class Group(Base):
    """One group's collective."""

    name: str | None = described(None, "label in reports (default: group0, group1, ...)")
    ranks: list[Annotated[int, Field(ge=0, le=MAX_RANKS)]] = described(
        doc="global ranks, as a list or a string such as '0-7' or '0,8'", type="ranks", min_length=1)
    collective: CollectiveName = described("all_reduce", "the collective", "collective")
    size: Size = described(doc="nccl-tests' S", type="size")
    dtype: DType = described("float32", "element type", "dtype")
    op: Op = described("sum", "reduce op", "op")
    root: int = described(0, "root, as an index into ranks", ge=0, le=MAX_RANKS)
    start: Time = described(0.0, "when it starts", "time")
    algorithm: str | None = described(None, "force an algorithm (default: model.algorithm, else the tuner)")
    protocol: Protocol | None = described(None, "force a protocol", "protocol")

    @field_validator("ranks", mode="before")
    @classmethod
    def _ranks(cls, v):
        if isinstance(v, str):
            out = []
            try:
                for part in v.replace(" ", "").split(","):
                    a, _, b = part.partition("-")
                    lo, hi = int(a), int(b or a)
                    if hi < lo or hi - lo > MAX_RANKS or len(out) > MAX_RANKS:
                        raise ValueError
                    out.extend(range(lo, hi + 1))
            except ValueError:
                raise ValueError("expected ranks as a list or a string such as '0-7' or '0,8,16'") from None
            return out
        return v

    @field_validator("ranks")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v):
            raise ValueError("expected distinct ranks")
        return v



class ContentionSpec(Base):
    """Several groups' collectives at once on one cluster, so they share links and NICs."""

    kind: Literal["contention"] = described(doc="contention")
    groups: list[Group] = described(doc="the groups", type="list of groups", min_length=1, max_length=64)
    baseline: bool = described(True, "also run each group alone, to report the slowdown")


# ---- running -----------------------------------------------------------------------------------------------
@dataclass
class GroupSpec:
    name: str
    ranks: list[int]
    collective: str = "all_reduce"
    size: int = 1 << 30
    dtype: str = "float32"
    op: str = "sum"
    root: int = 0
    start: float = 0.0
    algorithm: str | None = None
    protocol: str | None = None


@dataclass
class GroupResult(CollectiveRecord):
    """One group's collective as it ran beside the others (its record), its name, and its time alone."""

    name: str = ""
    alone: float | None = None  # seconds, alone on the cluster

    @property
    def slowdown(self) -> float | None:
        return self.time / self.alone if self.alone else None

    def as_dict(self) -> dict:
        return {"name": self.name, "collective": self.collective, "ranks": self.ranks, "size": self.size,
                "start": self.start, "time": self.time, "alone": self.alone, "algorithm": self.algorithm,
                "protocol": self.protocol, "slowdown": self.slowdown, "busbw": self.busbw}


def run_groups(session: Session, groups: list[GroupSpec]) -> dict:
    """Start every group at its start time on `session` and run to the end; returns each group's Op by name."""
    ops = {}
    for g in groups:
        coll = make_collective(g.collective, g.ranks, g.size, g.dtype, g.op, g.root)
        choice = choose(session.cluster, coll, g.algorithm, g.protocol)  # a forced choice that cannot run fails now
        ops[g.name] = session.collective(g.collective, g.ranks, count=coll.count, dtype=g.dtype, op=g.op,
                                         root=g.root, algorithm=choice.algorithm, protocol=choice.protocol,
                                         after=[session.timeout(g.start)] if g.start > 0 else (),
                                         tags={"group": g.name})
    session.run(session.all_of(ops.values()))
    return ops


def run_contention(cluster, groups: list[GroupSpec], detail: str = "flows",
                   baseline: bool = True) -> tuple[list[GroupResult], Session]:
    """Run the groups together (and, with baseline, each alone); returns results and the shared session."""
    session = Session(cluster, detail=detail)
    together = run_groups(session, groups)
    alone = {}
    if baseline:
        for g in groups:
            solo = GroupSpec(**{**asdict(g), "start": 0.0})
            alone[g.name] = run_groups(Session(cluster, detail="steps"), [solo])[g.name].record.time
    out = [GroupResult(**{f.name: getattr(together[g.name].record, f.name) for f in fields(CollectiveRecord)},
                       name=g.name, alone=alone.get(g.name)) for g in groups]
    return out, session


# ---- the workload kind -------------------------------------------------------------------------------------
class ContentionWorkload(Workload):
    kind = "contention"
    Spec = ContentionSpec

    def reference_sections(self) -> list[tuple[str, type]]:
        return super().reference_sections() + [("workload.groups[i]", Group)]

    def check(self, spec: ContentionSpec, scenario, cluster, error) -> None:
        forced = scenario.model.algorithm or {}
        for i, g in enumerate(spec.groups):
            for j, r in enumerate(g.ranks):
                if r >= cluster.num_ranks:
                    raise error(("workload", "groups", i, "ranks", j), f"expected a rank below "
                                f"{cluster.num_ranks} ({cluster.name} has {cluster.num_ranks}), found {r}")
            if g.root >= len(g.ranks):
                raise error(("workload", "groups", i, "root"), f"expected an index into ranks (below "
                                                               f"{len(g.ranks)}), found {g.root}")
            path = ("workload", "groups", i, "algorithm")
            name = g.algorithm or forced_algorithm(scenario.model, g.collective)
            if not g.algorithm:
                path = ("model", "algorithm") + ((g.collective,) if g.collective in forced else ())
            if name:
                check_algorithm(name, [g.collective], path, error)
                check_runs(name, g.collective, g.ranks, g.root, cluster, path, error)

    def run(self, spec: ContentionSpec, scenario, cluster, name: str, detail: str | None,
            progress=None) -> RunResult:
        model = scenario.model
        groups = [GroupSpec(g.name or f"group{i}", list(g.ranks), g.collective, g.size, g.dtype, g.op, g.root,
                            g.start, g.algorithm or forced_algorithm(model, g.collective), g.protocol or model.protocol)
                  for i, g in enumerate(spec.groups)]
        n = len({r for g in groups for r in g.ranks})
        rows, session = run_contention(cluster, groups, resolve_detail(detail or model.detail, n), spec.baseline)
        return RunResult(name, self.kind, cluster, rows, session.sim)

    def summary(self, result: RunResult) -> list[dict]:
        return [{"group": g.name, "collective": g.collective, "size": g.size, "time": g.time, "alone": g.alone,
                 "slowdown": g.slowdown, "busbw": g.busbw} for g in result.rows]

    def report(self, result: RunResult) -> list:
        table = [(g.name, g.collective, g.ranks, format_size(g.size), g.start * 1e6, g.time * 1e6,
                  None if g.alone is None else g.alone * 1e6, g.slowdown, g.busbw / 1e9,
                  f"{g.algorithm}/{g.protocol}") for g in result.rows]
        return [("groups running together", ["group", "collective", "ranks", "size", "start (us)", "time (us)",
                                             "alone (us)", "slowdown", "busbw (GB/s)", "choice"], table)]


WORKLOAD = ContentionWorkload()
