"""Recursive doubling and halving-doubling (Rabenseifner), as MPICH and gloo run them.

Any group size works: with p the largest power of two <= n and rem = n - p, the first 2*rem ranks pair up
(even rank r folds into r+1) before the power-of-two part and the pairs split again after it ("fold in first,
fold out last", MPICH's scheme). Virtual rank v stands for real rank 2v+1 when v < rem, else v + rem.

- recursive_doubling all_reduce: log2(p) exchanges of the whole buffer with partner v ^ 2^k (+2 fold steps).
- recursive_doubling all_gather: log2(p) exchanges; at step k each virtual rank sends all it holds (2^k shares)
  to v ^ 2^k (+2 fold steps: the folded rank's block in, everything out).
- halving_doubling all_reduce (Rabenseifner): a recursive-halving reduce-scatter (at distance 1, 2, 4, ...,
  sending half, a quarter, ... of the buffer) then the mirrored recursive-doubling all-gather: 2*log2(p) steps
  (+2 fold steps). Big exchanges go to near ranks, which share a node when ranks are numbered node-major.
- halving_doubling reduce_scatter: the first half of that; virtual rank v ends with its own block(s), the
  folded rank gets its block back in the last step: log2(p) (+2) steps.

In the halving phase, virtual rank v keeps the chunks c that agree with v on the bits handled so far, so it
ends owning chunk v (which is what reduce_scatter needs) without any final permutation.
"""
from __future__ import annotations

import math

import numpy as np

from .base import Algorithm, stepwise
from .cost import CostModel, log2_ceil
from .plan import Buffers, Collective, step
from .reduce_ops import combine


def fold(n: int) -> tuple[int, int, np.ndarray]:
    """(p, rem, real rank of each virtual rank)."""
    p = 1 << (n.bit_length() - 1)
    rem = n - p
    v = np.arange(p)
    return p, rem, np.where(v < rem, 2 * v + 1, v + rem)


def _split(count: int, parts: int) -> tuple[int, np.ndarray]:
    per = -(-count // parts) if parts else 0
    return per, np.clip(count - per * np.arange(parts), 0, per)


def _held(v: np.ndarray, m: int, p: int) -> np.ndarray:
    """Chunks c with c = v (mod 2m): (len(v), p // (2m)) indices."""
    return (v & (2 * m - 1))[:, None] + 2 * m * np.arange(p // (2 * m))[None, :]


def _class_sum(sizes: np.ndarray, m: int) -> np.ndarray:
    """sizes summed over each residue class mod 2m: entry r is the total of chunks c = r (mod 2m)."""
    return sizes.reshape(-1, 2 * m).sum(axis=0)


# ---- recursive doubling -------------------------------------------------------------------------------
def recursive_doubling_all_reduce(coll: Collective, buf: Buffers):
    n = coll.n
    if n == 1:
        return
    p, rem, vreal = fold(n)
    size = coll.count * coll.itemsize
    rows = buf.rows if buf.live else None
    extras = 2 * np.arange(rem)
    if rem:
        yield step(extras, extras + 1, size, reduce=True, label="fold in")
        if rows is not None:
            rows[extras + 1] = combine(buf.op, rows[extras + 1], rows[extras])
    v = np.arange(p)
    m = 1
    while m < p:
        partner = v ^ m
        yield step(vreal[v], vreal[partner], size, reduce=True, label=f"exchange x{m}")
        if rows is not None:
            lo, hi = vreal[v[v < partner]], vreal[partner[v < partner]]
            both = combine(buf.op, rows[lo], rows[hi])  # one result for both partners: equal bit for bit
            rows[lo] = both
            rows[hi] = both
        m *= 2
    if rem:
        yield step(extras + 1, extras, size, label="fold out")
        if rows is not None:
            rows[extras] = rows[extras + 1]


def _block_ranges(n: int, p: int, rem: int) -> tuple[np.ndarray, np.ndarray]:
    """Blocks [lo[v], hi[v]) that virtual rank v stands for (two when it absorbed a folded rank)."""
    v = np.arange(p)
    lo = np.where(v < rem, 2 * v, v + rem)
    hi = np.where(v < rem, 2 * v + 2, v + rem + 1)
    return lo, hi


def recursive_doubling_all_gather(coll: Collective, buf: Buffers):
    n = coll.n
    if n == 1:
        return
    p, rem, vreal = fold(n)
    blk = coll.count * coll.itemsize
    w = buf.rows.reshape(n, n, coll.count) if buf.live else None
    extras = 2 * np.arange(rem)
    if rem:
        yield step(extras, extras + 1, blk, label="fold in")
        if w is not None:
            w[extras + 1, extras] = w[extras, extras]
    lo, hi = _block_ranges(n, p, rem)
    v = np.arange(p)
    m = 1
    while m < p:
        base = (v // m) * m  # the aligned group of m virtual ranks whose blocks v holds
        glo, ghi = lo[base], hi[base + m - 1]
        partner = v ^ m
        yield step(vreal[v], vreal[partner], (ghi - glo) * blk, label=f"exchange x{m}")
        if w is not None:
            for a in range(p):
                w[vreal[partner[a]], glo[a]:ghi[a]] = w[vreal[a], glo[a]:ghi[a]]
        m *= 2
    if rem:
        yield step(extras + 1, extras, (n - 1) * blk, label="fold out")
        if w is not None:
            w[extras] = w[extras + 1]


# ---- halving-doubling ---------------------------------------------------------------------------------
def _halving(p, vreal, sizes, label, apply=None):
    """Recursive-halving reduce-scatter over p virtual chunks: at distance m, virtual rank v sends its partner
    the chunks the partner keeps. `apply(src, dst, chunks)` moves the data (real ranks, chunk indices per v)."""
    v = np.arange(p)
    m = 1
    while m < p:
        partner = v ^ m
        nbytes = _class_sum(sizes, m)[partner & (2 * m - 1)]
        yield step(vreal[v], vreal[partner], nbytes, reduce=True, label=f"{label} x{m}")
        if apply is not None:
            apply(vreal[v], vreal[partner], _held(partner, m, p))
        m *= 2


def _doubling(coll, p, vreal, sizes, work, label):
    """The mirrored recursive-doubling all-gather: virtual rank v starts with chunk v, ends with all."""
    v = np.arange(p)
    m = p // 2
    while m >= 1:
        partner = v ^ m
        nbytes = _class_sum(sizes, m)[v & (2 * m - 1)]
        yield step(vreal[v], vreal[partner], nbytes, label=f"{label} x{m}")
        if work is not None:
            c = _held(v, m, p)
            work[vreal[partner][:, None], c] = work[vreal[v][:, None], c]
        m //= 2


def halving_doubling_all_reduce(coll: Collective, buf: Buffers):
    n = coll.n
    if n == 1:
        return
    p, rem, vreal = fold(n)
    size = coll.count * coll.itemsize
    extras = 2 * np.arange(rem)
    rows = buf.rows if buf.live else None
    if rem:
        yield step(extras, extras + 1, size, reduce=True, label="fold in")
        if rows is not None:
            rows[extras + 1] = combine(buf.op, rows[extras + 1], rows[extras])
    per, true = _split(coll.count, p)
    sizes = (true * coll.itemsize).astype(np.float64)
    work = None
    if rows is not None:
        padded = np.zeros((n, p * per), dtype=rows.dtype)
        padded[:, :coll.count] = rows
        work = padded.reshape(n, p, per)

    def reduce_chunks(src, dst, chunks):
        work[dst[:, None], chunks] = combine(buf.op, work[dst[:, None], chunks], work[src[:, None], chunks])

    yield from _halving(p, vreal, sizes, "reduce-scatter", reduce_chunks if work is not None else None)
    yield from _doubling(coll, p, vreal, sizes, work, "all-gather")
    if rows is not None:
        rows[vreal] = work.reshape(n, -1)[vreal, :coll.count]
    if rem:
        yield step(extras + 1, extras, size, label="fold out")
        if rows is not None:
            rows[extras] = rows[extras + 1]


def halving_doubling_reduce_scatter(coll: Collective, buf: Buffers):
    """Recursive-halving reduce-scatter; rows (n, n*count), rank i ends with block i reduced."""
    n = coll.n
    if n == 1:
        return
    p, rem, vreal = fold(n)
    blk = coll.count * coll.itemsize
    extras = 2 * np.arange(rem)
    w = buf.rows.reshape(n, n, coll.count) if buf.live else None
    if rem:
        yield step(extras, extras + 1, n * blk, reduce=True, label="fold in")
        if w is not None:
            w[extras + 1] = combine(buf.op, w[extras + 1], w[extras])
    lo, hi = _block_ranges(n, p, rem)
    sizes = ((hi - lo) * blk).astype(np.float64)
    def reduce_blocks(src, dst, chunks):
        # Chunks here are uneven runs of whole blocks, so each virtual rank's share is gathered on its own.
        for a in range(p):
            blocks = np.concatenate([np.arange(lo[c], hi[c]) for c in chunks[a]])
            w[dst[a], blocks] = combine(buf.op, w[dst[a], blocks], w[src[a], blocks])

    yield from _halving(p, vreal, sizes, "reduce-scatter", reduce_blocks if w is not None else None)
    if rem:
        yield step(extras + 1, extras, blk, label="fold out")
        if w is not None:
            w[extras, extras] = w[extras + 1, extras]


def _predict_recursive_doubling(m: CostModel, coll: Collective) -> float:
    """Fold to a power of two p, then log2(p) exchanges with rank ^ 2^k: the whole buffer (all_reduce) or the
    doubling gathered share (all_gather)."""
    n, size = m.n, float(coll.nbytes)
    blk = coll.count * coll.itemsize
    p = 1 << (n.bit_length() - 1)
    if coll.kind == "all_reduce":
        return m.fold(size) + sum(m.step(size, m.xor_cross(1 << k)) for k in range(log2_ceil(p)))
    share = blk * n / p
    return m.fold(blk) + sum(m.step(share * (1 << k), m.xor_cross(1 << k)) for k in range(log2_ceil(p)))


def _predict_halving_doubling(m: CostModel, coll: Collective) -> float:
    """Fold to a power of two p, recursive halving (reduce-scatter), then for all_reduce recursive doubling."""
    n, size = m.n, float(coll.nbytes)
    blk = coll.count * coll.itemsize
    p = 1 << (n.bit_length() - 1)
    halves = [m.step(size / (2 << k), m.xor_cross(1 << k)) for k in range(log2_ceil(p))]
    if coll.kind == "all_reduce":
        return m.fold(size) + 2 * sum(halves)
    fold = (m.step(size, m.shift_cross(1)) + m.step(blk, m.shift_cross(1))) if n != p else 0.0
    return fold + sum(halves)


def _folded_reduced(m: CostModel, coll: Collective) -> tuple[float, int]:
    size = float(coll.nbytes)
    p = 1 << (m.n.bit_length() - 1)
    return (size if p != m.n else 0.0), p


def _recursive_doubling_reduced(m: CostModel, coll: Collective) -> float:
    folded, p = _folded_reduced(m, coll)
    return folded + math.log2(p) * float(coll.nbytes)


def _halving_doubling_reduced(m: CostModel, coll: Collective) -> float:
    folded, p = _folded_reduced(m, coll)
    return folded + (p - 1) / p * float(coll.nbytes)


RECURSIVE_DOUBLING = Algorithm("recursive_doubling", {"all_reduce": recursive_doubling_all_reduce,
                                                      "all_gather": recursive_doubling_all_gather},
                               stepwise(_predict_recursive_doubling), _recursive_doubling_reduced)
HALVING_DOUBLING = Algorithm("halving_doubling", {"all_reduce": halving_doubling_all_reduce,
                                                  "reduce_scatter": halving_doubling_reduce_scatter},
                             stepwise(_predict_halving_doubling), _halving_doubling_reduced)
