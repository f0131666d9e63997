"""Group-level collectives: one call runs a collective over a whole group, with no rank program per rank.

This is the front end for scale (the perf sweep, training schedules, 16k-GPU what-ifs): sizes only by default,
nccl-tests' size conventions and busbw factors.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from .algorithms import Collective, ReduceOp, run_collective
from .algorithms.reduce_ops import as_reduce_op
from .engine import Simulation
from .errors import SimcommError
from .hardware import Cluster, build_cluster
from .units import parse_size

# nccl-tests' busbw = algbw * factor(n): comparable to a link's speed whatever n is.
BUSBW_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n, "barrier": lambda n: 1.0,
}
# nccl-tests' S is the whole buffer for these (count per rank = S / (n * typesize)).
PER_RANK_SHARD = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
           "alltoall": "all_to_all", "bcast": "broadcast"}


@dataclass
class CollectiveRun:
    """Result of one simulated collective."""

    kind: str
    ranks: int
    size: int  # nccl-tests' S in bytes
    count: int  # elements per rank as nccl-tests counts them (the whole buffer for all_reduce)
    dtype: str
    algorithm: str
    protocol: str
    time: float  # simulated seconds
    predicted: float | None
    stats: dict = field(default_factory=dict)

    @property
    def algbw(self) -> float:
        """bytes/s: S / time."""
        return self.size / self.time if self.time > 0 else 0.0

    @property
    def busbw(self) -> float:
        return self.algbw * BUSBW_FACTOR[self.kind](self.ranks)


def canonical_kind(kind: str) -> str:
    k = ALIASES.get(kind.replace("-", "_").lower(), kind.replace("-", "_").lower())
    if k not in BUSBW_FACTOR:
        raise SimcommError(f"unknown collective {kind!r}; expected one of {', '.join(sorted(BUSBW_FACTOR))}")
    return k


def make_collective(kind: str, ranks, size: int, dtype="float32", op="SUM", root: int = 0) -> Collective:
    """A Collective from nccl-tests' total size S in bytes."""
    kind = canonical_kind(kind)
    ranks = np.asarray(ranks, dtype=np.int64)
    dt = np.dtype(dtype)
    n = len(ranks)
    per_rank = size // (dt.itemsize * n) if kind in PER_RANK_SHARD else size // dt.itemsize
    return Collective(kind, ranks, int(per_rank), dt, as_reduce_op(op), root)


def simulate_collective(kind: str, size, *, cluster="hgx-h100", nodes: int | None = None,
                        ranks: int | None = None, dtype="float32", op="SUM", root: int = 0,
                        algorithm: str | None = None, protocol: str | None = None, detail: str = "steps",
                        sim: Simulation | None = None) -> CollectiveRun:
    """Simulate one size-only collective of nccl-tests size `size` (bytes or "1GiB") over the first `ranks`
    ranks of `cluster` (a preset name with `nodes`, or a Cluster)."""
    if sim is None:
        c = cluster if isinstance(cluster, Cluster) else build_cluster(cluster, nodes=nodes or 1)
        sim = Simulation(c, detail)
    c = sim.cluster
    n = ranks or c.num_ranks
    if not 1 <= n <= c.num_ranks:
        raise SimcommError(f"ranks={n} does not fit {c.name}, which has {c.num_ranks} ranks")
    nbytes = parse_size(size, "size")
    coll = make_collective(kind, np.arange(n), nbytes, dtype, op, root)
    start = sim.now
    proc, _, choice = run_collective(sim, coll, None, algorithm, protocol)
    sim.env.run(proc)
    elapsed = sim.now - start
    dt = np.dtype(dtype)
    count = coll.count * (n if coll.kind in PER_RANK_SHARD else 1)
    return CollectiveRun(coll.kind, n, nbytes, count if dt.itemsize else 0, dt.name, choice.algorithm,
                         choice.protocol, elapsed, choice.predicted, sim.stats())


MAX_SIZES = 4096  # a size series longer than this is a mistake (a tiny -i, a factor barely above 1)


def sizes_between(begin: int, end: int, factor: float = 2.0, increment: int | None = None,
                  limit: int = MAX_SIZES) -> list[int]:
    """nccl-tests' size series: begin, then begin * factor rounded down (or begin + increment), up to end.

    Every step must grow the size: a factor that rounds a size down to itself (8 x 1.1 -> 8), a non-finite factor
    and a series of more than `limit` sizes are refused with a SimcommError, never looped on.
    """
    for name, v in (("begin", begin), ("end", end)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise SimcommError(f"the size series' {name} must be a whole number of bytes, got {v!r}")
    begin, end = int(begin), int(end)
    if begin <= 0 or end < begin:
        raise SimcommError(f"need 0 < begin <= end, got begin={begin}, end={end}")
    if increment is not None:
        if isinstance(increment, bool) or not isinstance(increment, numbers.Integral) or increment <= 0:
            raise SimcommError(f"the size increment must be a whole number of bytes > 0, got {increment!r}")
        count = (end - begin) // int(increment) + 1
        if count > limit:
            raise SimcommError(f"{begin}..{end} in steps of {increment} B is {count} sizes; at most {limit} "
                               "are allowed (use a larger increment or a factor)")
        return list(range(begin, end + 1, int(increment)))
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not math.isfinite(factor) \
            or not factor > 1:
        raise SimcommError(f"the size factor must be a finite number > 1, got {factor!r}")
    out, s = [], begin
    while True:
        out.append(s)
        if len(out) > limit:
            raise SimcommError(f"{begin}..{end} with factor {factor:g} is more than {limit} sizes "
                               "(use a larger factor)")
        grown = s * factor  # a float; may be inf for a huge factor, which simply ends the series
        if grown > end:
            return out
        nxt = math.floor(grown)
        if nxt <= s:
            raise SimcommError(f"factor {factor:g} does not grow the size {s} B ({s} x {factor:g} rounds down to "
                               f"{nxt}); use a factor of at least {(s + 1) / s:.4g} or a larger begin")
        s = nxt


__all__ = ["BUSBW_FACTOR", "MAX_SIZES", "CollectiveRun", "ReduceOp", "canonical_kind", "make_collective", "simulate_collective",
           "sizes_between"]
