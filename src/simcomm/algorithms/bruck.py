"""Bruck's algorithms: all_gather and all_to_all in ceil(log2 n) steps for any n.

all_gather: rank r keeps its blocks in relative order (r, r+1, ...); at step k it sends the first
min(2^k, n-2^k) of them to r - 2^k and receives as many from r + 2^k. A final local rotation puts block i at
position i. Steps: ceil(log2 n) transfers, then the rotation.

all_to_all: a local rotation puts the block for rank r+j at position j; at step k every rank sends the blocks at
the positions with bit k set to r + 2^k (packed into one message), so a block for r+j travels j = sum of its bits;
a final local rotation (and reversal) orders the received blocks by source. Steps: ceil(log2 n) transfers, with
a rotation before and after. Uneven splits are honoured (message sizes follow the blocks really carried).

Local rotations are HBM copies (read + write). The executor charges local work as reductions (3 x bytes:
two reads and a write), so a copy of B bytes is charged as a "reduction" of 2B/3 bytes: exactly 2B of HBM traffic.
Packing before each send is not charged (NCCL-style kernels read the blocks in place).
"""
from __future__ import annotations

import numpy as np

from .base import Algorithm, stepwise
from .cost import CostModel, log2_ceil
from .plan import Buffers, Collective, Step, step


def copy_charge(ranks: np.ndarray, nbytes) -> tuple[np.ndarray, np.ndarray]:
    """A local_reduce entry whose HBM cost equals a copy of nbytes (read once, written once)."""
    ranks = np.asarray(ranks, dtype=np.int64)
    return ranks, np.broadcast_to(np.asarray(nbytes, dtype=np.float64) * 2.0 / 3.0, ranks.shape).copy()


def _local(label: str, ranks, nbytes) -> Step:
    empty = np.empty(0, dtype=np.int64)
    return Step(empty, empty, np.empty(0), label=label, local_reduce=copy_charge(ranks, nbytes))


def bruck_all_gather(coll: Collective, buf: Buffers):
    n = coll.n
    if n == 1:
        return
    r = np.arange(n)
    blk = coll.count * coll.itemsize
    w = buf.rows.reshape(n, n, coll.count) if buf.live else None
    d = 1
    while d < n:
        cnt = min(d, n - d)
        src = (r + d) % n
        yield step(src, r, cnt * blk, label=f"all-gather x{d}")
        if w is not None:
            idx = (r[:, None] + d + np.arange(cnt)[None, :]) % n
            w[r[:, None], idx] = w[src[:, None], idx]
        d *= 2
    yield _local("rotate", r, n * blk)


def bruck_all_to_all(coll: Collective, buf: Buffers):
    n = coll.n
    r = np.arange(n)
    splits = coll.splits
    isz = coll.itemsize
    own = (splits.sum(axis=1) if splits is not None else np.full(n, n * coll.count)) * isz
    if n == 1:
        if buf.live:
            _deliver(buf, np.zeros((1, 1), dtype=np.int64))
        return
    # tag[r, j]: the source of the block sitting at position j of rank r; its destination is tag + j.
    track = buf.live or splits is not None
    tag = np.repeat(r[:, None], n, axis=1) if track else None
    pos = np.arange(n)
    yield _local("rotate in", r, own)
    d, k = 1, 0
    while d < n:
        moving = (pos >> k) & 1 == 1
        if track:
            sizes = splits[tag, (tag + pos[None, :]) % n] if splits is not None else np.full((n, n), coll.count)
            nbytes = (sizes * moving[None, :]).sum(axis=1) * isz
        else:
            nbytes = int(moving.sum()) * coll.count * isz
        dst = (r + d) % n
        yield step(r, dst, nbytes, label=f"all-to-all x{d}")
        if track:
            tag[np.ix_(dst, np.flatnonzero(moving))] = tag[np.ix_(r, np.flatnonzero(moving))]
        d, k = d * 2, k + 1
    received = (splits.sum(axis=0) if splits is not None else np.full(n, n * coll.count)) * isz
    yield _local("rotate out", r, received)
    if buf.live:
        _deliver(buf, tag)


def _deliver(buf: Buffers, tag: np.ndarray) -> None:
    """Each rank d files the block at its position j, which the schedule brought from rank tag[d, j]'s position
    j (its block for rank tag + j), as the block from that source: out[d][s] = in[s][d] when the schedule is
    right."""
    blocks_in, blocks_out = buf.rows
    n = tag.shape[0]
    for d in range(n):
        for j in range(n):
            s = int(tag[d, j])
            out = blocks_out[d][s]
            out[...] = np.asarray(blocks_in[s][(s + j) % n]).reshape(out.shape)


def _predict_bruck(m: CostModel, coll: Collective) -> float:
    """log2(n) shifts by 2^k plus the local rotations (one for all_gather, two for all_to_all)."""
    n = m.n
    blk = coll.count * coll.itemsize
    copy = m.local_copy(n * blk)
    if coll.kind == "all_gather":
        return copy + sum(m.step(min(1 << k, n - (1 << k)) * blk, m.shift_cross(1 << k)) for k in range(log2_ceil(n)))
    pos = np.arange(n)
    return 2 * copy + sum(m.step(float(((pos >> k) & 1).sum()) * blk, m.shift_cross(1 << k))
                          for k in range(log2_ceil(n)))


BRUCK = Algorithm("bruck", {"all_gather": bruck_all_gather, "all_to_all": bruck_all_to_all}, stepwise(_predict_bruck))
