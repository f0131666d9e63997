"""The executor's latency clocks over a run of identical steps, advanced on one clock per class.

A step started at time T updates the clocks r (one per (channel, rank), flattened) as the executor's step does,
with the same floating-point operations in the same order:

    arrival = max(r[p[y]], T) + (((T + off[y]) - T) + lat[y])    for a clock y fed by clock p[y] this step
    r[y] = max(r[y], arrival)
    r[y] = r[y] + add[y]             (reductions not fused with the transfer: they delay the data)
    r[y] = max(r[y], T + hbm[y])     (fused reductions that end after the data could move on)

off is the flow's offset of its last byte from the step's start, lat its latency; clocks fed by nothing have
off = -inf, and add = 0, hbm = -inf where they do not apply. Identical steps apply the same map while T advances.

Clocks whose pasts look alike stay bitwise equal: two clocks are equivalent when the labels (value, off, lat,
add, hbm) along their chains of predecessors agree as far back as the run reaches. Pointer doubling finds these
classes in O(log steps) passes over the clocks; the run is then iterated on one clock per class, which gives the
very numbers the step-by-step path gives. A symmetric pattern (a ring: a few classes per channel whatever its
length) thus costs O(classes) per step instead of O(ranks).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class StepMap:
    """One step's effect on the clocks (see the module docstring)."""

    pred: np.ndarray  # int64 per clock, -1 for none
    off: np.ndarray
    lat: np.ndarray
    add: np.ndarray | None = None
    hbm: np.ndarray | None = None

    def labels(self) -> tuple[np.ndarray, ...]:
        return tuple(x for x in (self.off, self.lat, self.add, self.hbm) if x is not None)


def _ids(keys: np.ndarray, bound: int) -> np.ndarray:
    """Dense ids (0, 1, ... in key order) of non-negative integer keys below `bound`."""
    if bound <= 4 * len(keys) + (1 << 20):  # a table beats sorting
        seen = np.zeros(bound, dtype=bool)
        seen[keys] = True
        return (np.cumsum(seen) - 1)[keys]
    return np.unique(keys, return_inverse=True)[1].reshape(-1)


def _factorize(*columns: np.ndarray) -> np.ndarray:
    """Dense ids of the distinct rows of the given equal-length columns."""
    ids = np.zeros(len(columns[0]), dtype=np.int64)
    count = 1
    for col in columns:
        values, inv = np.unique(col, return_inverse=True)
        ids = _ids(ids * len(values) + inv.reshape(-1), count * len(values))
        count = int(ids.max()) + 1
    return ids


def clock_classes(r: np.ndarray, m: StepMap, steps: int) -> np.ndarray:
    """Class id of every clock such that clocks of one class stay equal for `steps` applications of m."""
    cls = _factorize(r, *m.labels())
    jump = m.pred.copy()
    reach = 1  # cls says the label sequences agree for this many predecessors back
    while reach <= steps:
        before = int(cls.max()) + 1
        back = np.where(jump >= 0, cls[np.maximum(jump, 0)], -1)
        cls = _ids(cls * (before + 1) + back + 1, before * (before + 1))
        if int(cls.max()) + 1 == before:
            break  # no class split: the partition is stable for any number of steps
        jump = np.where(jump >= 0, jump[np.maximum(jump, 0)], -1)
        reach *= 2
    return cls


_CHUNK = 1 << 18  # clocks x steps handled at once (memory: a few arrays of this many floats)


def advance(r: np.ndarray, m: StepMap, starts: np.ndarray) -> np.ndarray:
    """The clocks after applying m once at each start time in `starts` (in order)."""
    if not len(starts):
        return r
    cls = clock_classes(r, m, len(starts))
    _, rep = np.unique(cls, return_index=True)  # one clock per class, classes in id order
    q = len(rep)
    pred = m.pred[rep]
    back = np.where(pred >= 0, cls[np.maximum(pred, 0)], q)  # q: a slot that stays -inf
    off, lat = m.off[rep], m.lat[rep]
    add = None if m.add is None else m.add[rep]
    hbm = None if m.hbm is None else m.hbm[rep]
    clocks = np.append(r[rep], -np.inf)
    most = max(1, _CHUNK // q)
    s, total, trial, stepwise = 0, len(starts), 16, 1
    while s < total:
        done = 0 if add is not None else _hidden(clocks, back, off, lat, hbm, starts[s:s + min(trial, most)])
        if done:
            s += done
            trial *= 2
            continue
        end = min(total, s + stepwise)
        _steps(clocks, back, off, lat, add, hbm, starts[s:end])
        s, stepwise, trial = end, 2 * stepwise, 16  # the hidden form did not hold: try it again less often
    return clocks[:q][cls]


def _steps(clocks: np.ndarray, back: np.ndarray, off, lat, add, hbm, starts: np.ndarray) -> None:
    """The general step at each of `starts`, one after the other (the transfer costs of a chunk computed at once:
    the same floats, element by element)."""
    q = len(back)
    cur = clocks[:q]
    buf = np.empty(q)
    for lo in range(0, len(starts), max(1, _CHUNK // q)):
        chunk = starts[lo:lo + max(1, _CHUNK // q)]
        t2 = chunk[:, None]
        cost = ((t2 + off) - t2) + lat
        extra = None if hbm is None else t2 + hbm
        for k, t in enumerate(chunk.tolist()):
            clocks.take(back, out=buf)
            np.maximum(buf, t, out=buf)
            buf += cost[k]
            np.maximum(cur, buf, out=cur)
            if add is not None:
                cur += add
            if extra is not None:
                np.maximum(cur, extra[k], out=cur)


def _hidden(clocks: np.ndarray, back: np.ndarray, off, lat, hbm, starts: np.ndarray) -> int:
    """Apply the steps at `starts` while every clock a step reads is no later than the step's start (its latency
    hides behind the previous step): then arrival = T + (((T + off) - T) + lat), the very floats the general step
    computes, and each clock is the running max of its arrivals, all steps at once. Returns how many steps from
    the first were applied (0: the first step reads a clock later than its start)."""
    q = len(back)
    if (clocks[back] > starts[0]).any():
        return 0
    t = starts[:, None]
    arrival = t + (((t + off) - t) + lat)
    if hbm is not None:
        np.maximum(arrival, t + hbm, out=arrival)
    after = np.maximum.accumulate(arrival, axis=0)
    np.maximum(after, clocks[:q], out=after)  # each clock after each step
    read = np.empty((len(starts), q + 1))
    read[0] = clocks
    read[1:, :q] = after[:-1]
    read[1:, q] = -np.inf
    late = (read[:, back] > t).any(axis=1)
    done = int(np.argmax(late)) if late.any() else len(starts)
    if done:
        clocks[:q] = after[done - 1]
    return done


def chain_step(ready: np.ndarray, chains: tuple, cost: np.ndarray, t0: float, flat_index) -> np.ndarray:
    """One step on the clocks `ready` (channels x ranks): chains = (channel written, sender, receiver, flow[,
    channel read]); each receiver's clock becomes its latest of its sender's clock (or t0) plus the flow's cost.
    Channels the chains name first get every rank's latest clock so far. flat_index (a BoundedCache) keeps each
    chain set's flat indices, as plans reuse one set for many steps."""
    ch, src, dst, flow = chains[:4]
    read = chains[4] if len(chains) > 4 else ch  # the clock read at the sender, if not the one written
    channels = max(int(ch.max()), int(read.max())) + 1
    if channels > len(ready):
        ready = np.vstack([ready, np.repeat(ready.max(axis=0, keepdims=True), channels - len(ready), axis=0)])
    n = ready.shape[1]
    flat = ready.reshape(-1)
    key = (id(chains), n)
    idx = flat_index.get(key)
    if idx is None or idx[0] is not chains:
        idx = flat_index.put(key, (chains, read * n + src, ch * n + dst))
    _, fsrc, fdst = idx
    arrival = np.maximum(flat[fsrc], t0)
    arrival += cost[flow]
    # Each (channel, receiver) has one predecessor in a chain step, so plain assignment is the max.
    flat[fdst] = np.maximum(flat[fdst], arrival)
    return ready
