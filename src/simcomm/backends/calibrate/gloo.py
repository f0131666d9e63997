"""`simcomm calibrate` for this host's gloo: measure (or load measurements), fit the cpu-host figures, hold back
points, write a profile, and report the errors before and after.

Free figures: the per-rank loopback bandwidth and latency, the host's aggregate copy bandwidth (every rank's
transfers share the cores), the memory bandwidth reductions run at, launch and per-step overheads, an all_gather
efficiency, and the rate at which a core faults in fresh memory (gloo's all_gather maps its output afresh from
32 MiB: protocols.fresh_output_time).
Split: fit on 2 and 4 ranks at every other size and the largest (4 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB) plus the
2-rank ping-pong; hold back 3 ranks entirely and the sizes in between (16 KiB, 256 KiB, 4 MiB) of 2 and 4 ranks.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from ...hardware import Tuning, write_profile
from .fit import PINGPONG, Free, Observation, Space, fit, predict
from .measure import Measurement

TRAIN_RANKS = (2, 4)


def default_space(cores: int | None = None) -> Space:
    import os
    return Space("cpu-host", tuning=Tuning(cores=cores if cores is not None else os.cpu_count() or 0), free=[
        Free("overrides.loopback_bandwidth", 2e8, 5e10, 3e9),
        Free("params.host_bandwidth", 2e8, 1e11, 6e9),
        Free("overrides.loopback_latency", 1e-7, 5e-4, 1.5e-5),
        Free("overrides.memory_bandwidth", 2e8, 1e11, 5e9),
        Free("tuning.launch_overhead", 1e-7, 2e-3, 3e-5),
        Free("tuning.step_overhead", 1e-7, 2e-3, 2e-5),
        Free("tuning.efficiency.all_gather", 0.05, 4.0, 1.0),
        Free("tuning.first_touch_rate", 2e8, 5e10, 3e9),
    ])


def split(measurements: list[Measurement]) -> tuple[list[Measurement], list[Measurement]]:
    """(training, held back): see the module docstring."""
    sizes = sorted({m.size for m in measurements})
    even = set(sizes[0::2]) | {sizes[-1]}
    train, held = [], []
    for m in measurements:
        if m.collective == "sendrecv" or (m.ranks in TRAIN_RANKS and m.size in even):
            train.append(m)
        else:
            held.append(m)
    return train, held


def observations(ms: list[Measurement]) -> list[Observation]:
    # the measured "sendrecv" is half a ping-pong (one message in flight), not nccl-tests' sendrecv (every rank
    # sending at once, which on one host shares its copy bandwidth between both directions)
    return [Observation(PINGPONG if m.collective == "sendrecv" else m.collective, m.ranks, m.size, m.time)
            for m in ms]


@dataclass
class PointReport:
    collective: str
    ranks: int
    size: int
    measured: float
    before: float
    after: float
    held_back: bool
    spread: float  # median round / fastest round - 1, over every pass
    passes: list = field(default_factory=list)  # the point's fastest round in each pass, seconds

    @property
    def error_before(self) -> float:
        return self.before / self.measured - 1

    @property
    def error_after(self) -> float:
        return self.after / self.measured - 1


@dataclass
class GlooCalibration:
    values: dict
    points: list[PointReport] = field(default_factory=list)
    profile: str | None = None

    def median_abs(self, held_back: bool, after: bool = True) -> float:
        errs = [abs((p.after if after else p.before) / p.measured - 1) for p in self.points
                if p.held_back == held_back]
        return statistics.median(errs) if errs else float("nan")

    def held_back_by_group(self) -> dict:
        """Median |error| after the fit of the held-back points, per (collective, ranks)."""
        groups: dict[tuple, list[float]] = {}
        for p in self.points:
            if p.held_back:
                groups.setdefault((p.collective, p.ranks), []).append(abs(p.error_after))
        return {k: statistics.median(v) for k, v in sorted(groups.items())}

    def noise(self) -> dict:
        """How noisy the host was: rounds against the fastest round, and passes against each other."""
        spreads = [p.spread for p in self.points]
        reps = [max(p.passes) / min(p.passes) - 1 for p in self.points if len(p.passes) > 1]
        return {"median_round_spread": statistics.median(spreads) if spreads else None,
                "max_round_spread": max(spreads) if spreads else None,
                "median_pass_difference": statistics.median(reps) if reps else None,
                "max_pass_difference": max(reps) if reps else None}


def merge(passes: list[list[Measurement]]) -> list[Measurement]:
    """One measurement per point: the fastest round of every pass (the host's load only slows rounds down)."""
    by: dict[tuple, list[float]] = {}
    for ms in passes:
        for m in ms:
            by.setdefault((m.collective, m.ranks, m.size), []).extend(m.rounds or [m.time])
    return [Measurement(k[0], k[1], k[2], min(v), v) for k, v in by.items()]


def calibrate_gloo(passes: list[list[Measurement]], out: str | None = None, progress=None,
                   meta: dict | None = None, sweeps: int = 3, steps: int = 12) -> GlooCalibration:
    """Fit on the training points of the merged passes; every point reported before/after and per pass."""
    merged = merge(passes)
    per_pass = [{(m.collective, m.ranks, m.size): m.time for m in ms} for ms in passes]
    train, held = split(merged)
    space = default_space()
    values = fit(space, observations(train), sweeps=sweeps, steps=steps, progress=progress)
    fitted = space.with_values(values)
    obs = observations(merged)
    before = predict(Space("cpu-host"), obs)
    after = predict(fitted, obs)
    held_ids = {id(m) for m in held}
    points = [PointReport(m.collective, m.ranks, m.size, m.time, b, a, id(m) in held_ids, m.spread,
                          [pp[(m.collective, m.ranks, m.size)] for pp in per_pass
                           if (m.collective, m.ranks, m.size) in pp])
              for m, b, a in zip(merged, before, after)]
    result = GlooCalibration(values, points)
    if out:
        fit_record = {"source": "simcomm calibrate (gloo over TCP loopback on this host)",
                      "training_points": len(train), "held_back_points": len(held),
                      "median_abs_error_held_back_before": result.median_abs(True, after=False),
                      "median_abs_error_held_back_after": result.median_abs(True),
                      "noise": result.noise(), **(meta or {})}
        t = fitted.tuning
        result.profile = write_profile(out, fitted.preset, params=fitted.params, overrides=fitted.overrides,
                                       tuning=replace(t, sources=("simcomm calibrate: gloo measured on this host",)),
                                       fit=fit_record)
    return result
