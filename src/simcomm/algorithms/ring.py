"""Ring algorithms (NCCL's and gloo's default) and pipelined chains for rooted collectives.

Buffers are viewed as (ranks, chunks, chunk_elements), padded so chunks are equal; padding only ever meets
padding, so it never touches results. A ring step moves one chunk per rank to its neighbour, all ranks at once.
gloo's own ring (its segmentation and order, bitwise) lives in gloo.py.
"""
from __future__ import annotations

import numpy as np

from .base import Algorithm, ring_shape_reduced
from .cost import CostModel, pipelined_end
from .fold import fold
from .plan import Buffers, Collective, channel_stride, step
from .reduce_ops import combine
from .tree_schedule import MAX_SLICES, SLICE_BYTES


def _split(count: int, parts: int) -> tuple[int, np.ndarray]:
    """Elements per padded chunk, and each chunk's true element count."""
    per = -(-count // parts) if parts else 0
    true = np.clip(count - per * np.arange(parts), 0, per)
    return per, true


def _chunked(rows: np.ndarray, parts: int, per: int) -> np.ndarray:
    n, count = rows.shape
    if count == parts * per:
        return rows.reshape(n, parts, per)  # no padding needed: a view
    padded = np.zeros((n, parts * per), dtype=rows.dtype)
    padded[:, :count] = rows
    return padded.reshape(n, parts, per)


def ring_orders(coll: Collective, channels: int | None = None) -> np.ndarray:
    """Ring orders (channels x n, group ranks) the way NCCL builds them.

    Within a node any order is one NVSwitch hop. Across nodes each channel snakes through the nodes so that every
    inter-node hop joins the same local GPU on both sides (the same NIC rail), and channel c is rotated by c, so
    the channels together use every rail once per direction. Where GPUs share a NIC (fewer channels than GPUs per
    node), the rotation strides by GPUs per channel, so each channel leaves and enters through its own NIC (as NCCL
    spreads its rings over the NICs). Groups that do not span whole nodes evenly get one ring in rank order.
    """
    n = coll.n
    rpn = coll.placement.ranks_per_node
    identity = np.arange(n)[None, :]
    if not rpn or n <= 1:
        return identity
    nodes = coll.ranks // rpn
    _, starts, counts = np.unique(nodes, return_index=True, return_counts=True)
    k = int(counts[0])
    if len(counts) < 2 or (counts != k).any() or not (np.diff(nodes) >= 0).all():
        return identity
    channels = channels or coll.placement.channels or k
    orders = np.empty((channels, n), dtype=np.int64)
    local = np.arange(k)
    stride = channel_stride(k, channels)
    even = (np.arange(len(starts)) % 2 == 0)[:, None]  # nodes in even positions go forward, odd ones back
    for c in range(channels):
        forward = (c * stride + local) % k
        backward = (c * stride - 1 - local) % k
        orders[c] = (starts[:, None] + np.where(even, forward[None, :], backward[None, :])).reshape(-1)
    return orders


def _ring_flows(orders: np.ndarray):
    """The (src, dst) pairs every step of these rings uses, merged with weights (the same each step), and the
    per-channel chains behind them (for latency)."""
    c, n = orders.shape
    src = orders.reshape(-1)
    dst = np.roll(orders, -1, axis=1).reshape(-1)
    pairs, index, weight = np.unique(src * n + dst, return_inverse=True, return_counts=True)
    chains = (np.repeat(np.arange(c), n), src, dst, index)  # each (channel, dst) once: one predecessor
    return pairs // n, pairs % n, weight, chains


def ring_all_reduce(coll: Collective, buf: Buffers, orders: np.ndarray | None = None,
                    chunk_of: np.ndarray | None = None):
    """Reduce-scatter then all-gather around each channel's ring: 2(n-1) steps of count/(channels*n) elements.

    chunk_of[k] names the element block that starts at ring position k (identity by default). The numerics follow each block's partial sum as it travels:
    at every step the receiving rank combines its own input with the partial sum it was sent, so each block is
    reduced in exactly the ring's order; the all-gather phase only copies finished blocks.
    """
    n = coll.n
    if n == 1:
        return
    orders = ring_orders(coll) if orders is None else orders
    channels = len(orders)
    chunk_of = np.arange(n) if chunk_of is None else chunk_of
    per, _ = _split(coll.count, channels * n)
    src_f, dst_f, weight, chains = _ring_flows(orders)
    nbytes = per * coll.itemsize
    if buf.unstacked:  # fold each block along its ring straight from the ranks' arrays (fold.py)
        yield step(src_f, dst_f, nbytes, reduce=True, label="reduce-scatter", weight=weight, chains=chains,
                   repeat=n - 1)
        yield step(src_f, dst_f, nbytes, label="all-gather", weight=weight, chains=chains, repeat=n - 1)
        # Channel c's block chunk_of[q] starts at position q of the channel's ring and goes round it.
        rings = [(orders[c], c * n + chunk_of, np.arange(n)) for c in range(channels)]
        result = fold(buf.sources, coll.count, per, rings, lambda a, b, out: combine(buf.op, a, b, out=out))
        buf.rows = np.broadcast_to(result, (n, coll.count))
        return
    x = _chunked(buf.rows, channels * n, per).reshape(n, channels, n, per) if buf.live else None
    acc = np.empty((channels, n, per), dtype=buf.rows.dtype) if buf.live else None
    ch = np.repeat(np.arange(channels), n)
    src = orders.reshape(-1)
    dst = np.roll(orders, -1, axis=1).reshape(-1)
    pos = np.tile(np.arange(n), channels)
    # Every step moves the same flows: one step repeated n-1 times per phase (the executor times repeats once).
    yield step(src_f, dst_f, nbytes, reduce=True, label="reduce-scatter", weight=weight, chains=chains,
               repeat=n - 1)
    if x is not None:
        for s in range(n - 1):
            blk = chunk_of[(pos - s) % n]
            incoming = x[src, ch, blk] if s == 0 else acc[ch, blk]
            acc[ch, blk] = _combine(buf, x[dst, ch, blk], incoming)
    yield step(src_f, dst_f, nbytes, label="all-gather", weight=weight, chains=chains, repeat=n - 1)
    if acc is not None:
        buf.rows = np.broadcast_to(acc.reshape(-1)[:coll.count], (n, coll.count))


def _combine(buf: Buffers, local: np.ndarray, incoming: np.ndarray) -> np.ndarray:
    return combine(buf.op, local, incoming)


def _ring_blocks(coll: Collective, buf: Buffers, reduce: bool):
    """Shared body of ring reduce-scatter and all-gather: rows (n, n*count), block b belongs to group rank b."""
    n = coll.n
    if n == 1:
        return
    orders = ring_orders(coll)
    channels = len(orders)
    per, _ = _split(coll.count, channels)
    src_f, dst_f, weight, chains = _ring_flows(orders)
    x = _chunked(buf.rows.reshape(n * n, coll.count), channels, per).reshape(n, n, channels, per) \
        if buf.live and reduce else None
    acc = np.empty((n, channels, per), dtype=buf.rows.dtype) if x is not None else None
    ch = np.repeat(np.arange(channels), n)
    src = orders.reshape(-1)
    dst = np.roll(orders, -1, axis=1).reshape(-1)
    pos = np.tile(np.arange(n), channels)
    name = "reduce-scatter" if reduce else "all-gather"
    yield step(src_f, dst_f, per * coll.itemsize, reduce=reduce, label=name, weight=weight, chains=chains,
               repeat=n - 1)
    if x is not None:
        for s in range(n - 1):
            # The block owned by the rank at ring position j starts its journey at position j+1.
            blk = orders[ch, (pos - s - 1) % n]
            incoming = x[src, blk, ch] if s == 0 else acc[blk, ch]
            acc[blk, ch] = _combine(buf, x[dst, blk, ch], incoming)
    if acc is not None:
        result = acc.reshape(n, channels * per)[:, :coll.count]
        blocks = buf.rows.reshape(n, n, coll.count)
        blocks[np.arange(n), np.arange(n)] = result
    elif buf.live:
        # All-gather copies every rank's own block to everyone: the result is the same row on every rank.
        blocks = buf.rows.reshape(n, n, coll.count)
        buf.rows = np.broadcast_to(blocks[np.arange(n), np.arange(n)].reshape(-1), buf.rows.shape)


def ring_reduce_scatter(coll: Collective, buf: Buffers):
    """n-1 steps per channel ring; rank i ends with block i reduced."""
    yield from _ring_blocks(coll, buf, reduce=True)


def ring_all_gather(coll: Collective, buf: Buffers):
    """n-1 steps per channel ring; every rank ends with every block."""
    yield from _ring_blocks(coll, buf, reduce=False)


def _chain(coll: Collective) -> np.ndarray:
    """Group ranks in chain order starting at the root."""
    return (coll.root + np.arange(coll.n)) % coll.n


def pipeline_slices(nbytes: int) -> int:
    """How many slices a pipelined chain or tree cuts a buffer into (NCCL pipelines in ~128 KiB chunks)."""
    return int(min(MAX_SLICES, max(1, -(-nbytes // SLICE_BYTES))))


def _stages(order: np.ndarray, slices: int, true: np.ndarray):
    """The stages of a chain pipelined in `slices` along `order`: (src, dst, slice of each hop, bytes, stages).

    Stage t moves slice t - h over hop h. Consecutive stages in which every hop moves a full-size slice are the
    same flows: they come as one group (stages > 1) with the same arrays, for the executor to time once."""
    n = len(order)
    hops = np.arange(n - 1)
    full = true[0] if len(true) else 0
    steady = None
    t, total = 0, n - 1 + slices - 1
    while t < total:
        j = t - hops
        ok = (j >= 0) & (j < slices)
        if ok.all() and (true[j] == full).all():
            end = t
            while end + 1 < total and (end + 1 - hops[-1]) >= 0 and end + 1 < slices and true[end + 1] == full:
                end += 1
            if steady is None:
                steady = (order[hops], order[hops + 1])
            yield steady[0], steady[1], [t - hops for t in range(t, end + 1)], full, end + 1 - t
            t = end + 1
            continue
        yield order[hops[ok]], order[hops[ok] + 1], [j[ok]], true[j[ok]], 1
        t += 1


def chain_broadcast(coll: Collective, buf: Buffers, slices: int | None = None):
    """Root -> root+1 -> ... pipelined in `slices`: n-1+slices-1 stages of count/slices elements."""
    n = coll.n
    if n == 1:
        return
    slices = slices or pipeline_slices(coll.count * coll.itemsize)
    order = _chain(coll)
    per, true = _split(coll.count, slices)
    work = _chunked(buf.rows, slices, per) if buf.live else None
    t = 0
    for src, dst, js, nbytes, repeat in _stages(order, slices, true):
        yield step(src, dst, nbytes * coll.itemsize, label=f"broadcast stage {t + 1}", repeat=repeat)
        t += repeat
        if work is not None:
            for j in js:
                work[dst, j] = work[src, j]
    if work is not None:
        buf.rows[:] = work.reshape(n, -1)[:, :coll.count]


def chain_reduce(coll: Collective, buf: Buffers, slices: int | None = None):
    """... -> root+1 -> root, reducing along the way, pipelined in `slices`."""
    n = coll.n
    if n == 1:
        return
    slices = slices or pipeline_slices(coll.count * coll.itemsize)
    order = _chain(coll)[::-1]  # the far end first, the root last
    per, true = _split(coll.count, slices)
    work = _chunked(buf.rows, slices, per) if buf.live else None
    t = 0
    for src, dst, js, nbytes, repeat in _stages(order, slices, true):
        yield step(src, dst, nbytes * coll.itemsize, reduce=True, label=f"reduce stage {t + 1}", repeat=repeat)
        t += repeat
        if work is not None:
            for j in js:
                work[dst, j] = _combine(buf, work[dst, j], work[src, j])
    if work is not None:
        buf.rows[coll.root] = work.reshape(n, -1)[coll.root, :coll.count]


def predict_ring(m: CostModel, coll: Collective) -> float:
    """The simulated ring's time: base + the later of its bandwidth lockstep and its latency chain.

    Every step each rank sends size/n in chunks, one per channel. Inside a node that is the ring's whole cost:
    nsteps x (chunk transfer + hop latency), NCCL's ring formula. Across nodes the steps run in lockstep at the
    slower of the node's NICs (each node boundary carries size/n per step) and NVLink (a rank whose channels all
    have a neighbour in its node sends all of it there; with a channel per local rank each sends one chunk across);
    a chunk's latency adds up along its own path, which crosses a node boundary every ranks-per-node hops, and
    hides behind the lockstep where a step's transfer outlasts its hop. Under LL's rate cap a step lasts at
    least each rank's size/n at the cap, every transfer in it stretched alike. broadcast and reduce: _predict_chain.
    """
    n, kind, size = m.n, coll.kind, float(coll.nbytes)
    if kind in ("broadcast", "reduce"):
        return _predict_chain(m, coll)
    nsteps = 2 * (n - 1) if kind == "all_reduce" else n - 1
    per_step = size / n
    if m.nodes <= 1:
        return m.proto.base_latency + nsteps * (m.intra_lat + float(m.capped(per_step / m.proto_bw(m.intra_bw),
                                                                               per_step)))
    share = 1 - 1 / m.ppn if coll.placement.channels >= m.ppn else 1.0  # of per_step over NVLink
    t_intra = share * per_step / m.proto_bw(m.intra_bw)
    t_cross = per_step / m.proto_bw(m.node_net)
    stretch = float(m.cap_scale(max(t_intra, t_cross), per_step))
    t_intra, t_cross = t_intra * stretch, t_cross * stretch
    step = max(t_intra, t_cross)
    intra, cross = t_intra + m.intra_lat, t_cross + m.inter_lat  # a hop inside a node, and to the next node
    crossings = min(nsteps, -(-nsteps // m.ppn))
    chain = (nsteps - crossings) * intra + crossings * cross
    lockstep = (nsteps - 1) * step + cross + max(0.0, (m.ppn - 1) * (intra - step))
    return m.proto.base_latency + max(chain, lockstep)


def _predict_chain(m: CostModel, coll: Collective) -> float:
    """The simulated pipelined chain (chain_broadcast, chain_reduce): n - 1 + slices - 1 lockstep stages, each as
    long as its slowest busy hop's slice (a hop to another node goes at the NIC's rate), and the last slice's
    latency chain along the n - 1 hops (cost.pipelined_end); under LL's cap a stage lasts at least a slice at the
    cap (a rank sends one slice per stage), its hops stretched alike."""
    order = coll.ranks[_chain(coll)]
    cross = (order[1:] // m.rpn) != (order[:-1] // m.rpn)
    slices = pipeline_slices(coll.count * coll.itemsize)
    piece = -(-coll.count // slices) * coll.itemsize
    t_intra = piece / m.proto_bw(m.intra_bw)
    t_cross = piece / m.proto_bw(min(m.intra_bw, m.path_bw)) if cross.any() else t_intra
    hops = len(cross)
    stage = np.arange(hops + slices - 1)
    first, last = np.maximum(stage - slices + 1, 0), np.minimum(stage, hops - 1)  # the hops busy at each stage
    crossing = np.concatenate([[0], np.cumsum(cross)])
    times = np.where(crossing[last + 1] > crossing[first], t_cross, t_intra)
    stretch = m.cap_scale(times, piece)
    times = times * stretch
    costs = np.where(cross, t_cross, t_intra) * stretch[slices - 1:slices - 1 + hops] + \
        np.where(cross, m.inter_lat, m.intra_lat)
    return m.proto.base_latency + pipelined_end(times, costs, slices)


RING = Algorithm("ring", {"all_reduce": ring_all_reduce, "reduce_scatter": ring_reduce_scatter,
                          "all_gather": ring_all_gather, "broadcast": chain_broadcast, "reduce": chain_reduce},
                 predict_ring, ring_shape_reduced,
                 nccl_kinds=("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"),
                 gloo_kinds=("all_reduce",))
