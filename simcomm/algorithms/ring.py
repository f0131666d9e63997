"""Ring algorithms (NCCL's and gloo's default) and pipelined chains for rooted collectives.

Buffers are viewed as (ranks, chunks, chunk_elements), padded so chunks are equal; padding only ever meets
padding, so it never touches results. A ring step moves one chunk per rank to its neighbour, all ranks at once.
`direction=-1` runs the ring backwards, which gives gloo's summation order (chunk c accumulates from x[c-1] down
to x[c]).
"""
from __future__ import annotations

import numpy as np

from .plan import Buffers, Collective, step


def _split(count: int, parts: int) -> tuple[int, np.ndarray]:
    """Elements per padded chunk, and each chunk's true element count."""
    per = -(-count // parts) if parts else 0
    true = np.clip(count - per * np.arange(parts), 0, per)
    return per, true


def _chunked(rows: np.ndarray, parts: int, per: int) -> np.ndarray:
    n, count = rows.shape
    padded = np.zeros((n, parts * per), dtype=rows.dtype)
    padded[:, :count] = rows
    return padded.reshape(n, parts, per)


def ring_all_reduce(coll: Collective, buf: Buffers, direction: int = 1):
    """Reduce-scatter then all-gather around the ring: 2(n-1) steps of count/n elements."""
    n = coll.n
    if n == 1:
        return
    r = np.arange(n)
    nxt = (r + direction) % n
    per, true = _split(coll.count, n)
    work = _chunked(buf.rows, n, per) if buf.live else None
    # direction 1: chunk k goes k -> k+1 -> ... -> k-1, which then owns it (rank r owns chunk r+1).
    # direction -1: chunk c goes c-1 -> c-2 -> ... -> c (rank r owns chunk r), gloo's order.
    for s in range(n - 1):
        c = (r - s) % n if direction == 1 else (r + 1 + s) % n
        yield step(r, nxt, true[c] * coll.itemsize, reduce=True, label=f"reduce-scatter {s + 1}/{n - 1}")
        if work is not None:
            work[nxt, c] = _combine(buf, work[nxt, c], work[r, c])
    for s in range(n - 1):
        c = (r + 1 - s) % n if direction == 1 else (r + s) % n
        yield step(r, nxt, true[c] * coll.itemsize, label=f"all-gather {s + 1}/{n - 1}")
        if work is not None:
            work[nxt, c] = work[r, c]
    if work is not None:
        buf.rows[:] = work.reshape(n, -1)[:, :coll.count]


def _combine(buf: Buffers, local: np.ndarray, incoming: np.ndarray) -> np.ndarray:
    from .reduce_ops import combine
    return combine(buf.op, local, incoming)


def ring_reduce_scatter(coll: Collective, buf: Buffers):
    """n-1 steps; rows are (n, n*count) and rank i ends with block i reduced."""
    n = coll.n
    if n == 1:
        return
    r = np.arange(n)
    nxt = (r + 1) % n
    work = buf.rows.reshape(n, n, coll.count) if buf.live else None
    for s in range(n - 1):
        c = (r - s - 1) % n
        yield step(r, nxt, coll.count * coll.itemsize, reduce=True, label=f"reduce-scatter {s + 1}/{n - 1}")
        if work is not None:
            work[nxt, c] = _combine(buf, work[nxt, c], work[r, c])


def ring_all_gather(coll: Collective, buf: Buffers):
    """n-1 steps; rows are (n, n*count) with rank i's input in block i."""
    n = coll.n
    if n == 1:
        return
    r = np.arange(n)
    nxt = (r + 1) % n
    work = buf.rows.reshape(n, n, coll.count) if buf.live else None
    for s in range(n - 1):
        c = (r - s) % n
        yield step(r, nxt, coll.count * coll.itemsize, label=f"all-gather {s + 1}/{n - 1}")
        if work is not None:
            work[nxt, c] = work[r, c]


def _chain(coll: Collective) -> np.ndarray:
    """Group ranks in chain order starting at the root."""
    return (coll.root + np.arange(coll.n)) % coll.n


def chain_broadcast(coll: Collective, buf: Buffers, slices: int = 1):
    """Root -> root+1 -> ... pipelined in `slices`: n-1+slices-1 stages of count/slices elements."""
    n = coll.n
    if n == 1:
        return
    order = _chain(coll)
    per, true = _split(coll.count, slices)
    work = _chunked(buf.rows, slices, per) if buf.live else None
    for t in range(n - 1 + slices - 1):
        hops = np.arange(n - 1)
        j = t - hops
        ok = (j >= 0) & (j < slices)
        src, dst, js = order[hops[ok]], order[hops[ok] + 1], j[ok]
        yield step(src, dst, true[js] * coll.itemsize, label=f"broadcast stage {t + 1}")
        if work is not None:
            work[dst, js] = work[src, js]
    if work is not None:
        buf.rows[:] = work.reshape(n, -1)[:, :coll.count]


def chain_reduce(coll: Collective, buf: Buffers, slices: int = 1):
    """... -> root+1 -> root, reducing along the way, pipelined in `slices`."""
    n = coll.n
    if n == 1:
        return
    order = _chain(coll)[::-1]  # the far end first, the root last
    per, true = _split(coll.count, slices)
    work = _chunked(buf.rows, slices, per) if buf.live else None
    for t in range(n - 1 + slices - 1):
        hops = np.arange(n - 1)
        j = t - hops
        ok = (j >= 0) & (j < slices)
        src, dst, js = order[hops[ok]], order[hops[ok] + 1], j[ok]
        yield step(src, dst, true[js] * coll.itemsize, reduce=True, label=f"reduce stage {t + 1}")
        if work is not None:
            work[dst, js] = _combine(buf, work[dst, js], work[src, js])
    if work is not None:
        buf.rows[coll.root] = work.reshape(n, -1)[coll.root, :coll.count]
