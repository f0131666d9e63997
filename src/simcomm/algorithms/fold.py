"""A ring's reduction computed straight from the ranks' own arrays, in the ring's order, at memory speed.

In a ring reduce-scatter, chunk j starts as rank order[j, 0]'s slice and travels on: each rank it reaches
combines its own slice with the partial sum it received, acc = combine(local, acc). fold() computes exactly that,
step by step, with one numpy call per (step, rank) over the chunks the rank holds at that step, reading every
rank's data once and writing only the result: no stacked copy of all ranks' data, no padding. The plans keep
their step-by-step numerics for stacked rows; tests check both give the same bits.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

Combine = Callable[[np.ndarray, np.ndarray, np.ndarray], None]  # (local, incoming, out): out = local (op) incoming


def fold(sources: list[np.ndarray], count: int, per: int, order: np.ndarray, combine: Combine) -> np.ndarray:
    """The (count,) result of reducing chunk j (elements [j * per, (j + 1) * per) of every source, cut at count)
    along the ranks order[j, 0], order[j, 1], ...: acc = sources[order[j, 0]]; acc = combine(local, acc) for the
    rest. order is (chunks, n) with each step's column a list of ranks; chunks past count are ignored."""
    out = np.empty(count, dtype=sources[0].dtype)
    if count == 0 or per == 0:
        return out
    chunks = min(len(order), -(-count // per))
    full = min(chunks, count // per)  # chunks wholly inside the buffer: one 2-D view per rank
    if full:
        views = [src[:full * per].reshape(full, per) for src in sources]
        _fold_rows(views, out[:full * per].reshape(full, per), order[:full], combine)
    if chunks > full:  # the last, short chunk
        lo = full * per
        views = [src[lo:count].reshape(1, -1) for src in sources]
        _fold_rows(views, out[lo:count].reshape(1, -1), order[full:full + 1], combine)
    return out


def _fold_rows(views: list[np.ndarray], acc: np.ndarray, order: np.ndarray, combine: Combine) -> None:
    chunks, steps = order.shape
    for s in range(steps):
        ranks = order[:, s]
        if chunks == 1 or len(np.unique(ranks)) == chunks:  # one chunk per rank: plain views, in place
            for j, k in enumerate(ranks.tolist()):
                if s == 0:
                    acc[j] = views[k][j]
                else:
                    combine(views[k][j], acc[j], acc[j])
            continue
        by_rank = np.argsort(ranks, kind="stable")
        bounds = np.flatnonzero(np.diff(ranks[by_rank])) + 1
        for idx in np.split(by_rank, bounds):
            k = int(ranks[idx[0]])
            if s == 0:
                acc[idx] = views[k][idx]
            else:
                part = acc[idx]
                combine(views[k][idx], part, part)
                acc[idx] = part
