"""Contention: several groups' collectives started together on one simulation, so they share links and NICs.

Each group can also run alone on a fresh simulation of the same cluster; the ratio is the slowdown contention causes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..algorithms import choose, run_collective
from ..collective import BUSBW_FACTOR, make_collective
from ..engine import Simulation
from .names import DTYPES
from .perf import OP_NAMES


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
class GroupResult:
    name: str
    collective: str
    ranks: int
    size: int
    start: float
    time: float  # seconds, with the other groups running
    alone: float | None  # seconds, alone on the cluster
    algorithm: str
    protocol: str

    @property
    def slowdown(self) -> float | None:
        return self.time / self.alone if self.alone else None

    @property
    def busbw(self) -> float:
        return self.size / self.time * BUSBW_FACTOR[self.collective](self.ranks) if self.time > 0 else 0.0

    def as_dict(self) -> dict:
        return asdict(self) | {"slowdown": self.slowdown, "busbw": self.busbw}


def _launch(sim: Simulation, g: GroupSpec, times: dict, choices: dict):
    np_dtype, _ = DTYPES.get(g.dtype, (g.dtype, g.dtype))
    coll = make_collective(g.collective, g.ranks, g.size, np_dtype, OP_NAMES.get(g.op, g.op), g.root)
    choice = choose(sim.cluster, coll, g.algorithm, g.protocol)
    choices[g.name] = (choice, coll.nbytes)
    label = f"{g.name} {g.collective}:{choice.algorithm}:{choice.protocol}:{g.dtype}:{g.op}"

    def body():
        if g.start > 0:
            yield sim.env.timeout(g.start)
        begin = sim.now
        proc, _, _ = run_collective(sim, coll, None, choice.algorithm, choice.protocol, label=label)
        yield proc
        times[g.name] = sim.now - begin

    return sim.env.process(body())


def run_groups(sim: Simulation, groups: list[GroupSpec]) -> tuple[dict, dict]:
    """Start every group at its start time on `sim` and run to the end; returns (times, (choice, bytes) by name)."""
    times: dict[str, float] = {}
    choices: dict = {}
    procs = [_launch(sim, g, times, choices) for g in groups]
    sim.env.run(sim.env.all_of(procs))
    return times, choices


def run_contention(cluster, groups: list[GroupSpec], detail: str = "flows",
                   baseline: bool = True) -> tuple[list[GroupResult], Simulation]:
    """Run the groups together (and, with baseline, each alone); returns results and the shared simulation."""
    sim = Simulation(cluster, detail)
    together, choices = run_groups(sim, groups)
    alone = {}
    if baseline:
        for g in groups:
            solo = GroupSpec(**{**asdict(g), "start": 0.0})
            alone[g.name] = run_groups(Simulation(cluster, "steps"), [solo])[0][g.name]
    out = []
    for g in groups:
        choice, nbytes = choices[g.name]
        out.append(GroupResult(g.name, g.collective, len(g.ranks), nbytes, g.start, together[g.name],
                               alone.get(g.name), choice.algorithm, choice.protocol))
    return out, sim
