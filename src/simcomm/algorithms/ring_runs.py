"""A ring's latency clocks over its rotating stages, kept as runs of equal clocks in the frame of the sizes.

At stage j of a ring whose rank i sends size class kind[(i + j) % n] to rank i-1 (a rotating step), the rank
sending base position q is q - j, and the receiver of position q sends it on at the next stage. So with
y_q = clock of the rank that sends position q, the executor's step (executor._chain and after) reads

    y_q  <-  post_k( max(y_{q-1}, max(y_q, T) + cost_k) )        k = kind[q]

post_k being the stage's reduction on the receiver (a delay added, or a floor), and every class k the same
flows at every stage. Positions of one class whose clocks are equal stay equal, except the first of a run,
which also sees its left neighbour's clock: a run of equal clocks splits at most into its first position and
the rest, and equal neighbours merge again. A ring whose stages are alike bar a few chunks thus keeps a few runs
and a stage costs O(runs) instead of O(ranks), with the very floats the step-by-step path computes per rank.
"""
from __future__ import annotations

import numpy as np


class RingRuns:
    """The clocks y (one per base position, circular) as runs: run r holds positions [starts[r], starts[r+1])
    (the last one up to n), all of size class cls[r] with clock vals[r]; starts[0] is always 0."""

    def __init__(self, clocks: np.ndarray, kind: np.ndarray):
        self.n = len(clocks)
        self.kind = kind
        edge = np.r_[True, (clocks[1:] != clocks[:-1]) | (kind[1:] != kind[:-1])]
        self.starts = np.flatnonzero(edge)
        self.vals, self.cls = clocks[self.starts].copy(), kind[self.starts].copy()

    def __len__(self) -> int:
        return len(self.starts)

    def step(self, t0: float, cost: np.ndarray, add: np.ndarray | None, floor: np.ndarray | None,
             special=None) -> None:
        """One stage from t0: cost[k] per flow of class k, except at the positions special[0] (ascending), sent on
        routes of their own at costs special[1]; then add[k] added (reductions that delay the data) or floor[k]
        taken (fused reductions that end later), -inf / 0 where a class does not reduce."""
        own = cost[self.cls]
        if special is not None and len(special[0]):
            own = self._split(*special, own)
        vals, cls, starts = self.vals, self.cls, self.starts
        rest = np.maximum(vals, t0) + own  # the run's other positions: max(y, own) = own as cost >= 0
        before = np.empty_like(vals)  # each run's left neighbour (circular)
        before[0], before[1:] = vals[-1], vals[:-1]
        first = np.maximum(before, rest)
        ends = np.empty_like(starts)
        ends[:-1], ends[-1] = starts[1:], self.n
        pieces = 2 * len(starts)
        s2, v2, c2 = np.empty(pieces, np.int64), np.empty(pieces), np.empty(pieces, cls.dtype)
        s2[0::2], s2[1::2] = starts, starts + 1
        v2[0::2], v2[1::2] = first, rest
        c2[0::2], c2[1::2] = cls, cls
        if add is not None:
            v2 += add[c2]
        if floor is not None:
            np.maximum(v2, floor[c2], out=v2)
        keep = np.ones(pieces, dtype=bool)
        keep[1::2] = ends - starts > 1
        s2, v2, c2 = s2[keep], v2[keep], c2[keep]
        new = np.ones(len(s2), dtype=bool)
        new[1:] = (v2[1:] != v2[:-1]) | (c2[1:] != c2[:-1])
        self.starts, self.vals, self.cls = s2[new], v2[new], c2[new]

    def _split(self, where: np.ndarray, costs: np.ndarray, own: np.ndarray) -> np.ndarray:
        """Runs cut so that each position in `where` is a run of its own; the runs' costs, `costs` at those."""
        cuts = np.union1d(self.starts, np.union1d(where, where + 1))
        cuts = cuts[cuts < self.n]
        at = np.searchsorted(self.starts, cuts, side="right") - 1
        self.starts, self.vals, self.cls, own = cuts, self.vals[at], self.cls[at], own[at]
        own[np.searchsorted(cuts, where)] = costs
        return own

    def clocks(self, j: int) -> np.ndarray:
        """Every rank's clock after j stages (rank i sends base position i + j next)."""
        y = np.repeat(self.vals, np.diff(np.r_[self.starts, self.n]))
        return np.roll(y, -j)


def last_stage(held: np.ndarray, n: int, j: int) -> np.ndarray:
    """For each rank p of the ring, the last of stages 0..j-1 at which it received one of the base positions
    `held` (rank p receives position p+1+s at stage s), or -1 if none."""
    p = np.arange(n)
    if not len(held):
        return np.full(n, -1)
    ext = np.r_[held, held + n]
    at = np.searchsorted(ext, p + j, side="right") - 1
    x = ext[np.maximum(at, 0)]
    return np.where((at >= 0) & (x >= p + 1), x - p - 1, -1)
