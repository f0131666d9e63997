"""Group-level collectives in one call: simulate_collective runs one collective over a whole group on a fresh
Session (sizes only, nccl-tests' size conventions and busbw factors); make_collective builds the request from
nccl-tests' size S.

This is the front end for quick what-ifs at scale; schedules that run many operations use the Session directly.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field

import numpy as np

from .algorithms import Collective
from .algorithms.reduce_ops import as_reduce_op
from .errors import SimcommError
from .session import CollectiveRecord, Session, as_dtype
from .units import parse_size
from .vocab import OP_NAMES, canonical_kind, per_rank_count


@dataclass
class CollectiveRun(CollectiveRecord):
    """One simulated collective (see CollectiveRecord) and the simulator's own counters for it."""

    stats: dict = field(default_factory=dict)


def make_collective(kind: str, ranks, size: int, dtype="float32", op="sum", root: int = 0) -> Collective:
    """A Collective from nccl-tests' total size S in bytes (dtype by vocabulary name or alias, or a numpy dtype;
    op by vocabulary or ReduceOp name)."""
    kind = canonical_kind(kind)
    ranks = np.asarray(list(ranks) if isinstance(ranks, range) else ranks, dtype=np.int64)
    dt, _ = as_dtype(dtype)
    reduce_op = as_reduce_op(OP_NAMES.get(op, op) if isinstance(op, str) else op)
    return Collective(kind, ranks, per_rank_count(kind, size, dt.itemsize, len(ranks)), dt, reduce_op, root)


def simulate_collective(kind: str, size, *, cluster="hgx-h100", nodes: int | None = None,
                        ranks: int | None = None, dtype="float32", op="sum", root: int = 0,
                        algorithm: str | None = None, protocol: str | None = None,
                        detail: str = "steps") -> CollectiveRun:
    """Simulate one size-only collective of nccl-tests size `size` (bytes or "1GiB") over the first `ranks`
    ranks of `cluster` (a preset name with `nodes`, or a Cluster)."""
    session = Session(cluster, nodes=nodes, detail=detail)
    c = session.cluster
    n = ranks or c.num_ranks
    if not 1 <= n <= c.num_ranks:
        raise SimcommError(f"ranks={n} does not fit {c.name}, which has {c.num_ranks} ranks")
    ran = session.collective(kind, range(n), parse_size(size, "size"), dtype=dtype, op=op, root=root,
                             algorithm=algorithm, protocol=protocol)
    session.run(ran)
    return CollectiveRun(**asdict(ran.record), stats=session.stats())


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
    shown = f"{factor:g}" if float(f"{factor:g}") == factor else repr(float(factor))  # as given: 1.0000001, not 1
    out, s = [], begin
    while True:
        out.append(s)
        if len(out) > limit:
            raise SimcommError(f"{begin}..{end} with factor {shown} is more than {limit} sizes "
                               "(use a larger factor)")
        grown = s * factor  # a float; may be inf for a huge factor, which simply ends the series
        if grown > end:
            return out
        nxt = math.floor(grown)
        if nxt <= s:
            raise SimcommError(f"factor {shown} does not grow the size {s} B ({s} x {shown} rounds down to "
                               f"{nxt}); use a factor of at least {(s + 1) / s:.4g} or a larger begin")
        s = nxt


__all__ = ["MAX_SIZES", "CollectiveRun", "make_collective", "simulate_collective", "sizes_between"]
