"""Fitting a cluster description's figures to measured collective times.

An Observation is one measured point (collective, ranks, nodes, size, seconds). A Space is the base description
(preset, builder params, overrides, tuning) plus the free figures, each with bounds. fit() minimises the mean
absolute log error |ln(predicted / measured)| over the training points by coordinate descent in log space
(golden-section search on one figure at a time, a few sweeps): no derivative is needed, since every prediction
is a full simulation of that collective on the candidate cluster.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ...collective import simulate_collective
from ...hardware import Tuning, build_cluster
from ...session import Session

PINGPONG = "pingpong"  # an Observation of half a 2-rank ping-pong: one send, not nccl-tests' sendrecv


@dataclass(frozen=True)
class Observation:
    collective: str  # a collective kind, or PINGPONG
    ranks: int
    size: int
    seconds: float
    nodes: int = 1
    algorithm: str | None = None
    dtype: str = "float32"
    label: str = ""  # where it came from (a system, a log)


@dataclass(frozen=True)
class Free:
    """A figure to fit: `key` is "params.X", "overrides.X", "tuning.launch_overhead", "tuning.step_overhead",
    "tuning.chunk_overhead", "tuning.first_touch_rate" or "tuning.efficiency.F"; its value stays within [lo, hi]."""

    key: str
    lo: float
    hi: float
    start: float


@dataclass
class Space:
    preset: str
    params: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    tuning: Tuning = Tuning()
    free: list[Free] = field(default_factory=list)

    def with_values(self, values: dict) -> "Space":
        """A copy with the free figures set (values: key -> number)."""
        params, overrides = dict(self.params), dict(self.overrides)
        t = self.tuning
        launch, step, chunk, touch = t.launch_overhead, t.step_overhead, t.chunk_overhead, t.first_touch_rate
        eff = dict(t.efficiency)
        for key, v in values.items():
            head, _, name = key.partition(".")
            if head == "params":
                params[name] = v
            elif head == "overrides":
                overrides[name] = v
            elif key == "tuning.launch_overhead":
                launch = v
            elif key == "tuning.step_overhead":
                step = v
            elif key == "tuning.chunk_overhead":
                chunk = v
            elif key == "tuning.first_touch_rate":
                touch = v
            elif key.startswith("tuning.efficiency."):
                eff[key.split(".", 2)[2]] = v
            else:
                raise KeyError(key)
        tuning = replace(t, launch_overhead=launch, step_overhead=step, chunk_overhead=chunk,
                         first_touch_rate=touch, efficiency=tuple(sorted(eff.items())))
        return Space(self.preset, params, overrides, tuning, [])

    def cluster(self, ranks: int, nodes: int):
        """The cluster a measured sweep of `ranks` over `nodes` ran on (ranks spread evenly over the nodes)."""
        from ..compare_log import cluster_for
        probe = build_cluster(self.preset, params=self.params)
        if probe.device.kind == "cpu":
            return build_cluster(self.preset, nodes=nodes, ranks_per_node=ranks // nodes, params=self.params,
                                 overrides=self.overrides, tuning=self.tuning)
        base = build_cluster(self.preset, nodes=nodes, params=self.params, overrides=self.overrides,
                             tuning=self.tuning)
        return cluster_for(base, ranks, nodes)[0] if ranks // nodes == probe.ranks_per_node or nodes == 1 \
            else _spread(base, self, ranks // nodes, nodes)


def _spread(base, space: Space, per_node: int, nodes: int):
    """A cluster like `base` with only the first `per_node` GPUs of each node."""
    from ...hardware import Cluster, build_fabric, get_preset
    from ..placement import first_ranks
    template = first_ranks(base.template, per_node)
    fabric = build_fabric(get_preset(space.preset).default_fabric, nodes, template)
    return Cluster(f"{base.name} ({per_node} GPUs per node)", template, nodes, fabric)


def predict(space: Space, obs: list[Observation], cache: dict | None = None) -> list[float]:
    """Simulated seconds for every observation on the space's cluster (clusters cached per ranks/nodes)."""
    clusters = {} if cache is None else cache
    out = []
    for o in obs:
        key = (o.ranks, o.nodes)
        if key not in clusters:
            clusters[key] = space.cluster(o.ranks, o.nodes)
        if o.collective == PINGPONG:
            out.append(_one_way(clusters[key], o.size))
            continue
        r = simulate_collective(o.collective, o.size, cluster=clusters[key], ranks=o.ranks, dtype=o.dtype,
                                algorithm=o.algorithm)
        out.append(r.time)
    return out


def _one_way(cluster, nbytes: int) -> float:
    """Rank 0 sends nbytes to rank 1 on an idle cluster: what a rank program's send costs."""
    session = Session(cluster)
    session.run(session.send(0, 1, nbytes))
    return session.now


def log_errors(pred: list[float], obs: list[Observation]) -> list[float]:
    return [abs(math.log(p / o.seconds)) for p, o in zip(pred, obs)]


def objective(space: Space, obs: list[Observation]) -> float:
    """Mean absolute log error."""
    errs = log_errors(predict(space, obs), obs)
    return sum(errs) / len(errs)


def fit(space: Space, obs: list[Observation], sweeps: int = 3, steps: int = 12, progress=None) -> dict:
    """The free figures' values (key -> number) that minimise the mean |log error| over obs."""
    values = {f.key: f.start for f in space.free}
    best = objective(space.with_values(values), obs)
    for sweep in range(sweeps):
        for f in space.free:
            a, b = math.log(f.lo), math.log(f.hi)
            # golden-section on log(value), keeping the best point seen (the objective is not unimodal everywhere)
            g = (math.sqrt(5) - 1) / 2
            c, d = b - g * (b - a), a + g * (b - a)

            def at(x, f=f):
                trial = dict(values, **{f.key: math.exp(x)})
                return objective(space.with_values(trial), obs)
            fc, fd = at(c), at(d)
            for _ in range(steps):
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - g * (b - a)
                    fc = at(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + g * (b - a)
                    fd = at(d)
            x, fx = (c, fc) if fc < fd else (d, fd)
            if fx < best:
                best, values[f.key] = fx, math.exp(x)
            if progress:
                progress(sweep, f.key, values[f.key], best)
    return values
