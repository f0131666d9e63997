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
    combine(src, out). The two sweeps of the module docstring, one range per contiguous run of chunks."""
    ranks, chunks, starts = ring
    for first_sweep in (True, False):
        for p, rank in enumerate(np.asarray(ranks).tolist()):
            if first_sweep:
                yield from _runs(rank, chunks[starts == p], per, count, True)
                yield from _runs(rank, chunks[starts < p], per, count, False)
            else:
                yield from _runs(rank, chunks[starts > p], per, count, False)


def _runs(rank: int, chunks: np.ndarray, per: int, count: int, first: bool) -> Iterator[tuple[int, int, int, bool]]:
    """(rank, lo, hi, first) for each contiguous run of these chunks' elements."""
    if not len(chunks):
        return
    chunks = np.sort(chunks)
    breaks = np.flatnonzero(np.diff(chunks) != 1) + 1
    for run in np.split(chunks, breaks):
        lo, hi = int(run[0]) * per, min((int(run[-1]) + 1) * per, count)
        if lo < hi:
            yield rank, lo, hi, first
