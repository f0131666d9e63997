"""Calibration from nccl-tests logs: fit a preset's launch and per-step overheads and bandwidth efficiencies (per
algorithm family the logs exercise), and for logs that span nodes the NICs' latency, to measured sweeps, starting
from the preset's own figures; every other size is held back. The network latency is a figure of one system's
fabric (EFA and InfiniBand differ severalfold), so it belongs in a profile, not in the preset
(docs/validation.md)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from ...hardware import build_cluster, write_profile
from ...errors import SimcommError
from ..compare_log import cluster_for, log_dtype, measured_rows, sweep_identity
from ..nccl_log import Table
from .fit import Free, Observation, Space, fit, predict


@dataclass
class LogCalibration:
    values: dict
    train: list[Observation]
    held: list[Observation]
    before: list[float] = field(default_factory=list)  # predictions for held, default preset
    after: list[float] = field(default_factory=list)
    profile: str | None = None

    def median_abs(self, after: bool = True) -> float:
        pred = self.after if after else self.before
        return statistics.median(abs(p / o.seconds - 1) for p, o in zip(pred, self.held))


def table_observations(table: Table, preset: str, nodes: int | None = None, collective: str | None = None,
                       ranks: int | None = None, algorithm: str | None = None, label: str = "",
                       dropped=None) -> list[Observation]:
    """One Observation per measured size (out-of-place times) of a sweep on `preset`; the collective and ranks as
    given, else as the log says (a LogError asking for --collective / --ranks when it does not). The rows left out
    (see measured_rows) are counted into `dropped` (a Counter) if given."""
    from ...algorithms.catalog import ALGORITHMS
    kind, n = sweep_identity(table, collective, ranks)
    if algorithm is not None and algorithm not in ALGORITHMS[kind]:
        raise SimcommError(f"--algo {algorithm!r} is not an algorithm for {kind}; expected one of "
                           f"{', '.join(sorted(ALGORITHMS[kind]))}")
    _, nodes = cluster_for(preset, n, nodes)
    dtype = log_dtype(table.dtype)
    rows, left_out = measured_rows(table)
    if dropped is not None:
        dropped.update(left_out)
    return [Observation(kind, n, r.size, seconds, nodes, algorithm, dtype, label) for r, seconds in rows]


def families(space: Space, obs: list[Observation]) -> list[str]:
    """Algorithm families the observations run with on the space's cluster (what their efficiency should fit)."""
    from ...algorithms.catalog import ALGORITHMS
    from ...collective import simulate_collective
    seen = set()
    for o in obs:
        algo = o.algorithm or simulate_collective(o.collective, o.size, cluster=space.cluster(o.ranks, o.nodes),
                                                  ranks=o.ranks, dtype=o.dtype).algorithm
        seen.add(ALGORITHMS[o.collective][algo].family)
    return sorted(seen)


def calibrate_logs(obs: list[Observation], preset: str, out: str | None = None, meta: dict | None = None,
                   progress=None) -> LogCalibration:
    """Fit on every other size of each sweep, report on the rest."""
    train, held = [], []
    by_sweep: dict[tuple, list[Observation]] = {}
    for o in obs:
        by_sweep.setdefault((o.label, o.collective, o.ranks, o.nodes, o.algorithm), []).append(o)
    for sweep in by_sweep.values():
        sweep.sort(key=lambda o: o.size)
        train += sweep[0::2]
        held += sweep[1::2]
    if not held:
        raise SimcommError(f"calibrate needs a sweep of at least 2 measured sizes (every other size is held back to "
                           f"check the fit); the logs give {len(obs)} size(s), each sweep one at most")
    default = build_cluster(preset).template
    base = Space(preset, tuning=default.tuning)  # the preset as it is: "before"
    eff = dict(default.tuning.efficiency)
    free = [Free("tuning.launch_overhead", 1e-7, 2e-4, default.tuning.launch_overhead or 5e-6),
            Free("tuning.step_overhead", 1e-9, 2e-5, default.tuning.step_overhead or 1e-7)]
    free += [Free(f"tuning.efficiency.{f}", 0.3, 1.5, eff.get(f, 1.0)) for f in families(base, train)]
    if any(o.nodes > 1 for o in train) and default.nics:  # the fabric: its latency and what its transport achieves
        free += [Free("overrides.nic_latency", 1e-7, 1e-4, default.nic_latency or 1e-6),
                 Free("tuning.efficiency.net", 0.3, 1.5, eff.get("net", 1.0))]
    space = Space(preset, tuning=default.tuning, free=free)
    values = fit(space, train, progress=progress)
    fitted = space.with_values(values)
    result = LogCalibration(values, train, held, predict(base, held), predict(fitted, held))
    if out:
        t = fitted.tuning
        result.profile = write_profile(out, preset, overrides=fitted.overrides or None,
                                       tuning=replace(t, sources=("simcomm calibrate: nccl-tests logs",)),
                                       fit={"training_points": len(train), "held_back_points": len(held),
                                            "median_abs_error_held_back_before": result.median_abs(False),
                                            "median_abs_error_held_back_after": result.median_abs(True),
                                            **(meta or {})})

    return result
