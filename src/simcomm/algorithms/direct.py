"""Direct (one step, everyone to everyone or to/from the root), pairwise, binomial-tree and dissemination plans."""
from __future__ import annotations

import numpy as np

from .base import Algorithm, stepwise
from .cost import CostModel, log2_ceil
from .plan import Buffers, Collective, step
from .reduce_ops import combine


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    src, dst = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    off = src != dst
    return src[off], dst[off]


def direct_gather(coll: Collective, buf: Buffers):
    """Every rank sends its block to the root at once. Rows (n, n*count); block i of the root's row is rank i's."""
    n, root = coll.n, coll.root
    others = np.array([i for i in range(n) if i != root], dtype=np.int64)
    yield step(others, np.full(len(others), root), coll.count * coll.itemsize, label="gather")
    if buf.live:
        w = buf.rows.reshape(n, n, coll.count)
        w[root, others] = w[others, others]


def direct_broadcast(coll: Collective, buf: Buffers):
    """The root sends the whole buffer to every other rank at once (gloo's broadcast on one host: its time grows
    as n - 1 copies from the root, measured with torch 2.13 over loopback)."""
    n, root = coll.n, coll.root
    others = np.array([i for i in range(n) if i != root], dtype=np.int64)
    yield step(np.full(len(others), root), others, coll.count * coll.itemsize, label="broadcast")
    if buf.live:
        buf.rows[others] = buf.rows[root]


def direct_scatter(coll: Collective, buf: Buffers):
    """The root sends block i to rank i at once."""
    n, root = coll.n, coll.root
    others = np.array([i for i in range(n) if i != root], dtype=np.int64)
    yield step(np.full(len(others), root), others, coll.count * coll.itemsize, label="scatter")
    if buf.live:
        w = buf.rows.reshape(n, n, coll.count)
        w[others, others] = w[root, others]


def direct_all_gather(coll: Collective, buf: Buffers):
    """Every rank sends its block to every other rank in one step: n(n-1) flows."""
    n = coll.n
    src, dst = _pairs(n)
    yield step(src, dst, coll.count * coll.itemsize, label="all-gather")
    if buf.live:
        w = buf.rows.reshape(n, n, coll.count)
        w[dst, src] = w[src, src]


def direct_reduce_scatter(coll: Collective, buf: Buffers):
    """Every rank sends block j to rank j, which reduces the n inputs in rank order."""
    n = coll.n
    src, dst = _pairs(n)
    yield step(src, dst, coll.count * coll.itemsize, reduce=True, label="reduce-scatter")
    if buf.live:
        w = buf.rows.reshape(n, n, coll.count)
        r = np.arange(n)
        acc = w[0, r].copy()  # block j as held by rank 0, for every j
        for i in range(1, n):
            acc = combine(buf.op, acc, w[i, r])
        w[r, r] = acc


# Above this many flows an all_to_all goes in n - 1 shifts instead of at once (the engine holds every flow of a
# step at once: 16,384 ranks would be 268M flows).
MAX_ALL_TO_ALL_FLOWS = 1 << 20


def _all_to_all_at_once(n: int) -> bool:
    return n * (n - 1) <= MAX_ALL_TO_ALL_FLOWS


def direct_all_to_all(coll: Collective, buf: Buffers):
    """Every rank posts its sends to every peer at once, as NCCL (a group of ncclSend/ncclRecv) and gloo do: n(n-1)
    flows in one step, so a node's NICs carry only its off-node blocks while NVLink moves the rest. Groups with more
    than MAX_ALL_TO_ALL_FLOWS flows go in n - 1 lockstep shifts (at shift s rank r sends to r+s mod n). Uneven
    splits are honoured."""
    n = coll.n
    splits = coll.splits if coll.splits is not None else np.full((n, n), coll.count)
    if _all_to_all_at_once(n):
        src, dst = _pairs(n)
        yield step(src, dst, splits[src, dst] * coll.itemsize, label="all-to-all")
    else:
        r = np.arange(n)
        for s in range(1, n):
            peer = (r + s) % n
            yield step(r, peer, splits[r, peer] * coll.itemsize, label=f"all-to-all {s}/{n - 1}")
    if buf.live:
        blocks_in, blocks_out = buf.rows
        for i in range(n):
            for j in range(n):
                out = blocks_out[j][i]
                out[...] = np.asarray(blocks_in[i][j]).reshape(out.shape)


def binomial_broadcast(coll: Collective, buf: Buffers):
    """ceil(log2 n) steps; in step k every rank that has the data sends it 2^k further."""
    n = coll.n
    k = 1
    while k < n:
        rel = np.arange(min(k, n - k))
        src, dst = (rel + coll.root) % n, (rel + k + coll.root) % n
        yield step(src, dst, coll.count * coll.itemsize, label=f"broadcast x{k}")
        if buf.live:
            buf.rows[dst] = buf.rows[src]
        k *= 2


def binomial_reduce(coll: Collective, buf: Buffers):
    """ceil(log2 n) steps toward the root; the root's row ends reduced, other rows keep partial results."""
    n = coll.n
    rows = buf.rows.copy() if buf.live else None
    k = 1
    while k < n:
        rel = np.arange(0, n, 2 * k)
        rel = rel[rel + k < n]
        dst, src = (rel + coll.root) % n, (rel + k + coll.root) % n
        yield step(src, dst, coll.count * coll.itemsize, reduce=True, label=f"reduce x{k}")
        if rows is not None:
            rows[dst] = combine(buf.op, rows[dst], rows[src])
        k *= 2
    if rows is not None:
        buf.rows[coll.root] = rows[coll.root]


def dissemination_barrier(coll: Collective, buf: Buffers):
    """ceil(log2 n) rounds of empty messages to rank + 2^k: nobody leaves before everyone has arrived."""
    n = coll.n
    r = np.arange(n)
    k = 1
    while k < n:
        yield step(r, (r + k) % n, 0, label=f"barrier round x{k}")
        k *= 2


def ring_shift(coll: Collective, buf: Buffers):
    """nccl-tests' sendrecv: every rank sends its buffer to rank+1 and receives from rank-1, at once."""
    n = coll.n
    if n == 1:
        return
    r = np.arange(n)
    yield step(r, (r + 1) % n, coll.count * coll.itemsize, label="sendrecv")
    if buf.live:
        buf.rows[:] = buf.rows[(r - 1) % n]


def _predict_direct(m: CostModel, coll: Collective) -> float:
    """Every rank sends to every peer at once (gathers and scatters: the root's links carry all of it)."""
    n, kind, blk = m.n, coll.kind, coll.count * coll.itemsize
    if kind in ("all_gather", "reduce_scatter") or (kind == "all_to_all" and _all_to_all_at_once(n)):
        out_intra, out_inter = (m.ppn - 1) * blk, (n - m.ppn) * blk
        t = out_intra / m.proto_bw(m.intra_bw) if m.ppn > 1 else 0.0
        if out_inter:
            return m.inter_lat + float(m.capped(max(t, out_inter / m.proto_bw(m.rank_net)), (n - 1) * blk))
        return m.intra_lat + float(m.capped(t, (n - 1) * blk))
    if kind == "all_to_all":
        return sum(m.step(blk, m.shift_cross(s)) for s in range(1, n))
    if kind == "broadcast":  # the root's links carry n - 1 copies of the whole buffer
        blk = float(coll.nbytes)
    if kind in ("gather", "scatter", "broadcast"):
        t = (m.ppn - 1) * blk / m.proto_bw(m.intra_bw) if m.ppn > 1 else 0.0
        if n > m.ppn:
            t = max(t, (n - m.ppn) * blk / m.proto_bw(min(m.path_bw, m.node_net)))
            return m.inter_lat + float(m.capped(t, (n - 1) * blk))
        return m.intra_lat + float(m.capped(t, (n - 1) * blk))
    return m.step(blk, m.shift_cross(1))  # sendrecv: one shift


def _predict_binomial(m: CostModel, coll: Collective) -> float:
    """Step k: ranks < 2^k (from the root) send the whole buffer to rank + 2^k; it leaves the node once 2^k >= ppn."""
    size = float(coll.nbytes)
    return sum(m.step(size, m.ppn if (1 << k) >= m.ppn and m.nodes > 1 else 0) for k in range(log2_ceil(m.n)))


def _predict_dissemination(m: CostModel, coll: Collective) -> float:
    """log2(n) rounds of empty messages to rank + 2^k."""
    return sum(m.step(0.0, m.shift_cross(1 << k)) for k in range(log2_ceil(m.n)))


def _binomial_reduced(m: CostModel, coll: Collective) -> float:
    return log2_ceil(m.n) * float(coll.nbytes)


DIRECT = Algorithm("direct", {"reduce_scatter": direct_reduce_scatter, "all_gather": direct_all_gather,
                              "gather": direct_gather, "scatter": direct_scatter, "all_to_all": direct_all_to_all,
                              "sendrecv": ring_shift, "broadcast": direct_broadcast},
                   stepwise(_predict_direct), nccl_kinds=("all_to_all", "gather", "scatter", "sendrecv"),
                   gloo_kinds=("broadcast",))
BINOMIAL = Algorithm("binomial", {"broadcast": binomial_broadcast, "reduce": binomial_reduce},
                     stepwise(_predict_binomial), _binomial_reduced)
DISSEMINATION = Algorithm("dissemination", {"barrier": dissemination_barrier}, stepwise(_predict_dissemination),
                          nccl_kinds=("barrier",))
