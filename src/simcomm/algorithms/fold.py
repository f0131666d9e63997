"""A ring's reduction computed straight from the ranks' own arrays, in the ring's order, at memory speed.

In a ring reduce-scatter each chunk starts as one rank's slice and travels around the ring: every rank it reaches
combines its own slice with the partial result it received, acc = combine(local, acc). For a chunk that starts at
ring position q the ranks are those at positions q, q+1, ..., n-1, then 0, ..., q-1. fold() reproduces exactly
that order with two sweeps over the positions: the first adds position p to every chunk that started at or
before p (a chunk starting at p takes a copy), the second adds position p to every chunk that starts after p.
Chunks of one ring that start next to each other lie next to each other in memory, so each position costs a
numpy call or two over long contiguous ranges: every rank's data is read once, only the result is written, and
nothing is stacked or padded. tests/algorithms/test_fold.py checks it against the plans' step-by-step numerics.
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from ..arrays import in_parts

Combine = Callable[[np.ndarray, np.ndarray, np.ndarray], None]  # (local, incoming, out): out = local (op) incoming


def fold(sources: list[np.ndarray], count: int, per: int, rings: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
         combine: Combine) -> np.ndarray:
    """The (count,) result of the rings' reductions. Chunk j is elements [j * per, (j + 1) * per) of every
    source, cut at count. Each ring is (ranks by position, its chunks, each chunk's start position).

    Every element sees the same sequence of calls whatever range it is computed in, so large folds are cut into
    element ranges computed on all cores at once (arrays.in_parts) with the same bits."""
    out = np.empty(count, dtype=sources[0].dtype)
    if count == 0 or per == 0:
        return out
    moves = [move for ring in rings for move in _moves(ring, per, count)]

    def run(lo: int, hi: int) -> None:
        for rank, a, b, first in moves:
            a, b = max(a, lo), min(b, hi)
            if a >= b:
                continue
            if first:
                out[a:b] = sources[rank][a:b]
            else:
                combine(sources[rank][a:b], out[a:b], out[a:b])
    in_parts(run, count, len(sources) * count * out.itemsize)
    return out


def _moves(ring, per: int, count: int) -> Iterator[tuple[int, int, int, bool]]:
    """The ring's (rank, lo, hi, first) element ranges in fold order: out = src on [lo, hi) when first, else out =
    combine(src, out). The two sweeps of the module docstring, one range per contiguous run of chunks. The sets
    of chunks a sweep adds to grow or shrink by one start position at a time, so their runs are kept up to date
    as intervals rather than found again at every position (gloo's ring of 4,096 ranks: 0.43 s -> 0.05 s)."""
    ranks, chunks, starts = ring
    ranks = np.asarray(ranks).tolist()
    n = len(ranks)
    order = np.argsort(chunks, kind="stable")
    ids, pos = np.asarray(chunks)[order], np.asarray(starts)[order]
    adjacent = (np.diff(ids) == 1).tolist() + [False]
    at = [[] for _ in range(n + 2)]  # at[q + 1]: the chunks (sorted indices) that start at position q
    for k, q in enumerate(pos.tolist()):
        at[min(max(q, -1), n) + 1].append(k)  # before the first position or after the last: -1 or n
    earlier = _growing(at[:n], adjacent)  # earlier[p]: runs of the chunks that start before position p
    later = _growing(at[:1:-1], adjacent)[::-1]  # later[p]: runs of the chunks that start after p
    bounds = (ids * per).tolist(), np.minimum((ids + 1) * per, count).tolist()
    for p, rank in enumerate(ranks):
        for first, runs in ((True, _growing([at[p + 1]], adjacent)[0]), (False, earlier[p])):
            yield from _ranges(rank, runs, bounds, first)
    for p, rank in enumerate(ranks):
        yield from _ranges(rank, later[p], bounds, False)


def _growing(groups: list[list[int]], adjacent: list[bool]) -> list[list[tuple[int, int]]]:
    """The runs (first, last) of a set of indices after each group is added to it, in index order; k and k + 1
    are in one run only where adjacent[k]."""
    start_of, end_of = {}, {}  # a run's last index -> its first, and first -> last
    runs = []
    for group in groups:
        for k in group:
            a = b = k
            if k - 1 in start_of and adjacent[k - 1]:
                a = start_of.pop(k - 1)
                del end_of[a]
            if k + 1 in end_of and adjacent[k]:
                b = end_of.pop(k + 1)
                del start_of[b]
            end_of[a], start_of[b] = b, a
        runs.append(sorted(end_of.items()))
    return runs


def _ranges(rank: int, runs, bounds, first: bool) -> Iterator[tuple[int, int, int, bool]]:
    """(rank, lo, hi, first) for each run of chunks that holds elements."""
    lows, highs = bounds
    for a, b in runs:
        lo, hi = lows[a], highs[b]
        if lo < hi:
            yield rank, lo, hi, first
