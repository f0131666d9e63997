"""The executor's latency clocks of a closed form's representative ranks, one set per distinct history.

While every channel (or rail) sees the same costs, one set of clocks stands for all. Where a spine link makes
the rails' flows part, each rail keeps its own history; those histories differ in a few clocks (a few of
131,072 while the pipeline fills, a few thousand while it drains). So set 0 is kept whole and every other set
only where it differs from set 0 (flat positions, values). A stage's chain step (chains.chain_step) runs once,
on set 0; another set redoes only the clocks it could change differently: those written by an edge whose
sender's clock or cost differs, and its own differing ones. The arithmetic per clock is chain_step's, so every
set holds the very floats a whole copy would.
"""
from __future__ import annotations

import numpy as np

from ..engine.cache import BoundedCache
from .chains import chain_step

_NONE = (np.empty(0, dtype=np.int64), np.empty(0))


class Clocks:
    """The clocks (rows x ranks) of every distinct set; `of_rail[r]`: the set of channel (or rail) r. Set 0
    is `base`; `diffs[k]` lists where set k differs from it (sorted flat positions, values; set 0's is empty)."""

    def __init__(self, rows: int, n: int, t0: float):
        self.base = np.full((rows, n), t0)
        self.diffs = [_NONE]
        self.of_rail = [0]
        self._index = BoundedCache(4, 1 << 30)
        self._flat = None  # (chains, sender's clock, receiver's clock, last edge writing each clock)

    def advance(self, chains: tuple, costs: list[np.ndarray], t0: float) -> None:
        """One stage from t0: `costs` per flow, one array for every channel or one per channel.

        A clock no later than t0 can no longer matter (every read takes max(clock, t0), every write the max with
        an arrival after t0, and the collective ends after t0), so while the channels differ their clocks are
        raised to t0 first, and the channels whose pasts have stopped mattering become one again. Channels with
        the same set and equal costs take one step together."""
        self._grow(chains)
        if len(self.diffs) > 1:
            np.maximum(self.base, t0, out=self.base)
            self.diffs = [(idx, np.maximum(vals, t0)) for idx, vals in self.diffs]
            self._normalise()
            self.settle()
        cost_of = _distinct(costs)
        rails = max(len(self.of_rail), len(costs))
        pairs = [(self.of_rail[r % len(self.of_rail)], cost_of[r % len(costs)]) for r in range(rails)]
        steps = list(dict.fromkeys(pairs))  # distinct (set, cost) in first-seen order; the first is (0, rail 0's)
        ref = costs[steps[0][1]]
        others = [self._redo(chains, s, costs[c], ref, t0) for s, c in steps[1:]]
        self.base = chain_step(self.base, chains, ref, t0, self._index)
        flat = self.base.reshape(-1)
        self.diffs = [_NONE] + [(where[flat[where] != values], values[flat[where] != values])
                                for where, values in others]
        index = {p: k for k, p in enumerate(steps)}
        self.of_rail = [index[p] for p in pairs]
        self.settle()

    def raise_to(self, chains: tuple, floor_of_receiver: np.ndarray) -> None:
        """Fused reductions that end late: each clock the chains wrote is at least its receiver's reduction end
        (floor_of_receiver, one per chain entry: one value per receiver)."""
        n = self.base.shape[1]
        fdst = chains[0] * n + chains[2]
        flat = self.base.reshape(-1)
        flat[fdst] = np.maximum(flat[fdst], floor_of_receiver)
        if len(self.diffs) > 1:
            floor = np.full(flat.size, -np.inf)
            floor[fdst] = floor_of_receiver
            self.diffs = [(idx, np.maximum(vals, floor[idx])) for idx, vals in self.diffs]
            self._normalise()

    def settle(self) -> None:
        """Sets that hold the same clocks as one."""
        if len(self.diffs) == 1:
            return
        keys = [(idx.tobytes(), vals.tobytes()) for idx, vals in self.diffs]
        first = {}
        for k, key in enumerate(keys):
            first.setdefault(key, len(first))
        self.diffs = [self.diffs[keys.index(key)] for key in first]
        self.of_rail = [first[keys[s]] for s in self.of_rail]

    def latest(self) -> float:
        """The latest clock of any set (set 0 is whole, the others differ from it only where listed)."""
        return max([float(self.base.max())] + [float(vals.max()) for _, vals in self.diffs if len(vals)])

    # ---- the sparse sets -----------------------------------------------------------------------------------
    def _values(self, k: int, where: np.ndarray) -> np.ndarray:
        """Set k's clocks at flat positions `where`."""
        out = self.base.reshape(-1)[where]
        idx, vals = self.diffs[k]
        if len(idx) and len(where):
            at = np.minimum(np.searchsorted(idx, where), len(idx) - 1)
            hit = idx[at] == where
            out[hit] = vals[at[hit]]
        return out

    def _normalise(self) -> None:
        """Drop the listed clocks that equal set 0's."""
        flat = self.base.reshape(-1)
        self.diffs = [(idx[keep], vals[keep]) for idx, vals in self.diffs for keep in [vals != flat[idx]]]

    def _indices(self, chains: tuple):
        """The chains' flat clock indices (sender's clock read, receiver's clock written) and the last edge that
        writes each clock (-1: none): of several writes to one clock in a step, the last one stands."""
        if self._flat is None or self._flat[0] is not chains:
            ch, src, dst = chains[:3]
            read = chains[4] if len(chains) > 4 else ch
            n = self.base.shape[1]
            fsrc, fdst = read * n + src, ch * n + dst
            last = np.full(self.base.size, -1, dtype=np.int64)
            last[fdst] = np.arange(len(fdst))
            self._flat = (chains, fsrc, fdst, last)
        return self._flat[1:]

    def _redo(self, chains: tuple, k: int, cost: np.ndarray, ref: np.ndarray, t0: float):
        """Set k's step with per-flow `cost`, as (positions, values) of the clocks that may end up other than set
        0's step with `ref` leaves them; every other clock ends as set 0's does."""
        fsrc, fdst, last = self._indices(chains)
        flow = chains[3]
        mine = self.diffs[k][0]
        dirty = np.zeros(len(fsrc), dtype=bool)
        if len(mine):
            differs = np.zeros(self.base.size, dtype=bool)
            differs[mine] = True
            dirty |= differs[fsrc]
        other_cost = cost != ref
        if other_cost.any():
            dirty |= other_cost[flow]
        where = np.union1d(fdst[dirty], mine)
        values = self._values(k, where)
        edge = last[where]
        has = edge >= 0
        e = edge[has]
        arrival = np.maximum(self._values(k, fsrc[e]), t0)
        arrival += cost[flow[e]]
        values[has] = np.maximum(values[has], arrival)
        return where, values

    def _grow(self, chains: tuple) -> None:
        """Rows the chains name first, in every set: each rank's latest clock so far (chain_step's rule)."""
        rows = max(int(chains[0].max()), int((chains[4] if len(chains) > 4 else chains[0]).max())) + 1
        have, n = self.base.shape
        if rows <= have:
            return
        whole = [self._whole(k) for k in range(len(self.diffs))]
        grown = [np.vstack([w, np.repeat(w.max(axis=0, keepdims=True), rows - have, axis=0)]) for w in whole]
        self.base = grown[0]
        flat = self.base.reshape(-1)
        self.diffs = [_NONE] + [(np.flatnonzero(g.reshape(-1) != flat), g.reshape(-1)[g.reshape(-1) != flat])
                                for g in grown[1:]]
        self._flat = None

    def _whole(self, k: int) -> np.ndarray:
        """Set k as a whole array."""
        out = self.base.copy()
        idx, vals = self.diffs[k]
        out.reshape(-1)[idx] = vals
        return out


def _distinct(costs: list[np.ndarray]) -> list[int]:
    """For each cost array, the index of the first equal one."""
    out: list[int] = []
    for k, c in enumerate(costs):
        out.append(next((i for i in range(k) if out[i] == i and (costs[i] is c or np.array_equal(costs[i], c))),
                        k))
    return out
