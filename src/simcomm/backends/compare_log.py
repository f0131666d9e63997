"""Measured nccl-tests tables next to the simulator's prediction of the same sweep.

For every row: the measured time, the time simcomm predicts for the same collective, size, dtype and ranks on the
given cluster, and the signed error (predicted - measured) / measured. Per size band, the geometric-mean absolute
error exp(mean |ln(predicted / measured)|) - 1: symmetric in over- and under-prediction, and a 2x miss counts
100% either way.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from ..collective import simulate_collective
from ..errors import SimcommError
from ..hardware import Cluster, build_cluster
from ..units import format_size, parse_whole
from ..vocab import DTYPE_ALIASES, DTYPES, MAX_NODES, MAX_RANKS, MAX_SIZE, busbw_factor
from .nccl_log import LogError, Row, Table
from .placement import torchrun_cluster

MIB = 1 << 20
BANDS = (("< 1 MiB", 0, MIB), ("1-64 MiB", MIB, 64 * MIB), (">= 64 MiB", 64 * MIB, math.inf))


@dataclass
class Point:
    size: int
    measured: float  # seconds
    predicted: float  # seconds
    algorithm: str = ""
    protocol: str = ""

    @property
    def error(self) -> float:
        """Signed relative error of the prediction: (predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured


def gm_abs_error(points) -> float:
    """exp(mean |ln(predicted / measured)|) - 1 over points (nan for none)."""
    logs = [abs(math.log(p.predicted / p.measured)) for p in points if p.measured > 0 and p.predicted > 0]
    return math.exp(sum(logs) / len(logs)) - 1 if logs else math.nan


def band_errors(points) -> list[tuple[str, float, int]]:
    """(band, geometric-mean |error|, number of sizes) for each size band with points."""
    out = []
    for name, lo, hi in BANDS:
        pts = [p for p in points if lo <= p.size < hi]
        if pts:
            out.append((name, gm_abs_error(pts), len(pts)))
    return out


@dataclass
class Comparison:
    collective: str
    ranks: int
    nodes: int
    cluster: str
    title: str = ""
    source: str = ""
    points: list[Point] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # why rows were left out -> how many

    def bands(self) -> list[tuple[str, float, int]]:
        """(band, geometric-mean |error|, number of sizes) for each band with sizes."""
        return band_errors(self.points)

    def busbw(self, seconds: float, size: int) -> float:
        return size / seconds * busbw_factor(self.collective, self.ranks) / 1e9 if seconds > 0 else 0.0


def measured_rows(table: Table, in_place: bool = False) -> tuple[list[tuple[Row, float]], Counter]:
    """(row, measured seconds) for every row a comparison or a fit can use, and why the others are left out (a
    time that is negative, zero, NaN or infinite; a size of zero or beyond 1 PiB) -> how many."""
    usable, dropped = [], Counter()
    for row in table.rows:
        t = row.figures(in_place).time_us
        why = ("a NaN time" if math.isnan(t) else "an infinite time" if math.isinf(t) else "a negative time"
               if t < 0 else "a zero time" if t == 0 else "a zero size" if row.size <= 0 else
               "a size beyond 1 PiB" if row.size > MAX_SIZE else None)
        if why:
            dropped[why] += 1
        else:
            usable.append((row, t * 1e-6))
    return usable, dropped


def dropped_note(source: str, dropped: Counter) -> str:
    """'note: LOG:12: 3 rows left out: 2 with a negative time, 1 with a NaN time' ('' when none were)."""
    if not dropped:
        return ""
    total = sum(dropped.values())
    return (f"note: {source}: {total} row{'s' if total > 1 else ''} left out: "
            + ", ".join(f"{k} with {why}" for why, k in dropped.most_common()))


def log_dtype(name: str | None) -> str:
    """simcomm's dtype for the log's type column (float32 when the log has none)."""
    if not name:
        return "float32"
    key = DTYPE_ALIASES.get(name, name)
    if key not in DTYPES:
        raise SimcommError(f"the log's type {name!r} is not one simcomm knows ({', '.join(DTYPES)})")
    return key


def cluster_for(cluster, ranks: int, nodes: int | None) -> tuple[Cluster, int]:
    """The cluster a measured sweep ran on: `nodes` nodes (default: as few as hold the ranks) with ranks / nodes
    ranks each (a node's first GPUs when it has more)."""
    if ranks is None:
        raise SimcommError("the rank count of the measured run is unknown (the log does not say it); pass --ranks")
    if isinstance(cluster, Cluster):
        return cluster, cluster.num_nodes
    if nodes is not None:
        nodes = parse_whole(nodes, "nodes", 1, MAX_NODES)
    probe = build_cluster(cluster)
    if nodes is None:
        nodes = max(1, math.ceil(ranks / probe.ranks_per_node))
    if ranks % nodes:
        raise SimcommError(f"{ranks} ranks do not split evenly over {nodes} nodes")
    per_node = ranks // nodes
    if per_node > probe.ranks_per_node and probe.device.kind != "cpu":
        raise SimcommError(f"{ranks} ranks on {nodes} node(s) of {probe.name} would need {per_node} ranks per node; "
                           f"it has {probe.ranks_per_node} (pass --nodes)")
    return torchrun_cluster(cluster, per_node, nodes), nodes


def sweep_identity(table: Table, collective: str | None = None, ranks: int | None = None) -> tuple[str, int]:
    """(collective, ranks) of a measured sweep: as given, else as the log says (its test name, device lines, or
    busbw / algbw); a LogError naming the log and the option to pass when it cannot be told."""
    source = table.meta.get("source", "the log")
    kind = collective or table.collective
    if kind is None:
        raise LogError(f"{source}: the log does not say which collective it measured; pass --collective")
    n = ranks or table.ranks or table.inferred_ranks(kind)
    if not n:
        raise LogError(f"{source}: the log does not say how many ranks ran; pass --ranks")
    if not 1 <= n <= MAX_RANKS:
        raise LogError(f"{source}: {n} ranks (from {'--ranks' if ranks else 'the log'}) is beyond the {MAX_RANKS} "
                       f"simcomm simulates; pass --ranks")
    return kind, n


def compare_table(table: Table, cluster="hgx-h100", *, nodes: int | None = None, collective: str | None = None,
                  ranks: int | None = None, algorithm: str | None = None, protocol: str | None = None,
                  in_place: bool = False, progress=None) -> Comparison:
    """Simulate every size of `table` on `cluster` and pair it with the measurement; `progress(done, total)` after
    each size (a size of a large run can take seconds)."""
    kind, n = sweep_identity(table, collective, ranks)
    c, nodes = cluster_for(cluster, n, nodes)
    dtype = log_dtype(table.dtype)
    rows, dropped = measured_rows(table, in_place)
    cmp = Comparison(kind, n, nodes, c.name, table.title, str(table.meta.get("source", "")), dropped=dropped)
    for i, (row, measured) in enumerate(rows):
        run = simulate_collective(kind, row.size, cluster=c, ranks=n, dtype=dtype,
                                  root=max(0, row.root or 0), algorithm=algorithm, protocol=protocol)
        cmp.points.append(Point(row.size, measured, run.time, run.algorithm, run.protocol))
        if progress:
            progress(i + 1, len(rows))
    return cmp


def render(cmp: Comparison) -> str:
    """The comparison as a plain-text table and its band summary."""
    head = (f"{cmp.collective}, {cmp.ranks} ranks on {cmp.cluster}" + (f" [{cmp.title}]" if cmp.title else "")
            + (f"  ({cmp.source})" if cmp.source else ""))
    lines = [head, f"{'size':>12} {'measured us':>12} {'predicted us':>13} {'error':>8} {'meas busbw':>11} "
             f"{'pred busbw':>11}  simulated as"]
    for p in cmp.points:
        lines.append(f"{format_size(p.size):>12} {p.measured * 1e6:12.2f} {p.predicted * 1e6:13.2f} "
                     f"{p.error * 100:+7.1f}% {cmp.busbw(p.measured, p.size):11.2f} "
                     f"{cmp.busbw(p.predicted, p.size):11.2f}  {p.algorithm}/{p.protocol}")
    lines.append(f"geometric-mean |error|: {bands_text(cmp.bands())}")
    return "\n".join(lines)


def bands_text(bands) -> str:
    """'1-64 MiB 12.3% (6 sizes), ...' for band_errors' rows."""
    return ", ".join(f"{name} {err * 100:.1f}% ({k} size{'s' if k > 1 else ''})" for name, err, k in bands) \
        or "no sizes"
