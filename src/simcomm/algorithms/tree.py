"""NCCL's double binary tree all-reduce, and pipelined binary-tree broadcast and reduce.

Shape (NCCL src/graph/trees.cc and connect.cc): the nodes form a binary tree (`btree`), and a second tree
(`dtree`) is its mirror (even node count) or its shift by one (odd), so a node that is interior in one tree is
a leaf in the other. Inside a node the ranks form a chain hanging from the node's head rank, which is the one
that talks to the parent and child nodes. Each tree carries half of the data. Across nodes NCCL runs one
channel per NIC rail: channel c's chains start at the node's c-th rank, so the heads, and the NICs they use,
differ per channel; the data is split over 2 trees x channels. Without `ranks_per_node` on the collective
every rank is its own "node", which gives the two complementary binary trees over the ranks.

Pipelining: each tree's share is cut into `slices`. A rank at depth d (of a tree of depth D) sends slice j up to
its parent at stage (D - d) + j, after its children's slice j arrived (they are at depth d + 1); the root starts
sending slice j down at stage D + j, and a rank at depth d forwards it at stage D + d + j. So an all-reduce takes
2D + slices - 1 stages, every stage moving one slice per tree edge. Reductions happen at the receiving parent
(charged to its HBM). Identical flows of a stage (the channels' chains share rank pairs) travel as one weighted
flow. Small buffers use fewer channels, as NCCL does (MIN_CHANNEL_BYTES per channel and tree).

Latency: each (tree instance, slice) has its own clock per rank (the executor's `chains`), so a slice's latency
adds up along its own path, up then down (2D hops, NCCL's 2 * depth * hop latency), instead of leaking between
slices that a rank forwards in opposite directions. Stages run in lockstep for bandwidth, like every plan.
"""
from __future__ import annotations

import math

import numpy as np

from .base import Algorithm, stepwise
from .cost import CostModel
from .plan import Buffers, Collective, Step, step
from .reduce_ops import combine

SLICE_BYTES = 128 << 10  # target bytes per slice and tree instance (NCCL pipelines in chunks of this order)
MAX_SLICES = 128  # caps the stage count (and so the events) for huge buffers
CLOCK_WINDOW_DEPTHS = 4  # latency clocks kept per instance: this many tree depths of slices (see below)
MIN_CHANNEL_BYTES = 32 << 10  # a channel per this many bytes per tree, at most (NCCL: 64 B/thread x 512 threads)


# ---- tree shapes (ports of NCCL's ncclGetBtree / ncclGetDtree) ----------------------------------------------
def btree_parent(nranks: int, rank: int) -> int:
    """Parent of `rank` in NCCL's binary tree over 0..nranks-1 (rank 0 is the root, with one child)."""
    if rank == 0:
        return -1
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    up = (rank ^ bit) | (bit << 1)
    return rank ^ bit if up >= nranks else up


def dtree_parents(nranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Parents in NCCL's two complementary trees: the btree, and its mirror (even) or shift by one (odd)."""
    p0 = np.array([btree_parent(nranks, r) for r in range(nranks)], dtype=np.int64)
    if nranks % 2 == 1:
        shifted = np.array([btree_parent(nranks, (r - 1) % nranks) for r in range(nranks)], dtype=np.int64)
        p1 = np.where(shifted < 0, -1, (shifted + 1) % nranks)
    else:
        mirrored = np.array([btree_parent(nranks, nranks - 1 - r) for r in range(nranks)], dtype=np.int64)
        p1 = np.where(mirrored < 0, -1, nranks - 1 - mirrored)
    return p0, p1


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every vertex of a forest given by parent indices (-1 for roots)."""
    d = np.zeros(len(parent), dtype=np.int64)
    has = parent >= 0
    for _ in range(len(parent)):
        nd = np.where(has, d[np.maximum(parent, 0)] + 1, 0)
        if np.array_equal(nd, d):
            return d
        d = nd
    raise ValueError("parent array has a cycle")


def node_members(coll: Collective) -> list[np.ndarray]:
    """Group ranks on each node the group touches (nodes in order, members by global rank)."""
    rpn = coll.placement.ranks_per_node or 1
    nodes = coll.ranks // rpn
    order = np.lexsort((coll.ranks, nodes))
    _, starts = np.unique(nodes[order], return_index=True)
    return np.split(order, starts[1:])


def double_tree_parents(coll: Collective) -> list[np.ndarray]:
    """Parent arrays (over group ranks) of the tree instances NCCL's all-reduce uses: 2 trees x channels."""
    members = node_members(coll)
    nn = len(members)
    channels = max(1, min(coll.placement.channels if nn > 1 else len(members[0]),
                          min(len(m) for m in members)))
    # Like NCCL, small messages use fewer channels (each needs enough bytes to keep its threads busy).
    channels = max(1, min(channels, -(-coll.count * coll.itemsize // (2 * MIN_CHANNEL_BYTES))))
    out = []
    for node_parent in dtree_parents(nn):
        for c in range(channels):
            parent = np.full(coll.n, -1, dtype=np.int64)
            heads = np.array([m[c % len(m)] for m in members])
            for k, m in enumerate(members):
                chain = np.roll(m, -c)  # the chain starts at this channel's head
                parent[chain[1:]] = chain[:-1]
                if node_parent[k] >= 0:
                    parent[chain[0]] = heads[node_parent[k]]
            out.append(parent)
    return out


def rooted_tree_parent(coll: Collective) -> np.ndarray:
    """NCCL's binary tree over ranks relabelled so that the root is relative rank 0."""
    n = coll.n
    rel = np.array([btree_parent(n, r) for r in range(n)], dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    g = (np.arange(n) + coll.root) % n
    parent[g] = np.where(rel < 0, -1, (rel + coll.root) % n)
    return parent


# ---- the pipelined schedule -------------------------------------------------------------------------------
def choose_slices(nbytes_per_instance: float) -> int:
    return int(min(MAX_SLICES, max(1, math.ceil(nbytes_per_instance / SLICE_BYTES))))


def _sibling_index(parent: np.ndarray) -> np.ndarray:
    """Position of each vertex among its parent's children (0, 1, ...), so same-parent reductions can be ordered."""
    order = np.lexsort((np.arange(len(parent)), parent))
    p = parent[order]
    first = np.r_[True, p[1:] != p[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(p)), 0))
    sib = np.empty(len(parent), dtype=np.int64)
    sib[order] = np.arange(len(p)) - start
    return sib


def _merge(src, dst, nbytes, n: int):
    """Identical flows (same src, dst, size) travel as one weighted flow; also returns each flow's merged index."""
    sizes, size_code = np.unique(nbytes, return_inverse=True)
    key = (size_code.reshape(-1) * n + src) * n + dst
    uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    pair = uniq % (n * n)
    return pair // n, pair % n, sizes[uniq // (n * n)], counts.astype(np.float64), inverse.reshape(-1)


def _lag_estimate(parent: np.ndarray, node: np.ndarray) -> np.ndarray:
    """A static guess of how late each vertex's partial result is (hops to its deepest leaf, an inter-node hop
    counting as 10). The executor keeps the LAST of several same-step arrivals at one (clock, rank), so siblings
    feeding one parent are listed by this guess plus their own hop, the likely-latest last."""
    d = depths(parent)
    lag = np.zeros(len(parent))
    for level in range(int(d.max()), 0, -1):
        v = np.flatnonzero(d == level)
        hop = np.where(node[v] == node[parent[v]], 1.0, 10.0)
        np.maximum.at(lag, parent[v], lag[v] + hop)
    return lag


def pipelined_trees(coll: Collective, buf: Buffers, parents: list[np.ndarray], count: int, up: bool, down: bool,
                    rows: np.ndarray | None, label: str):
    """Run the tree instances `parents` pipelined; instance i owns the i-th of len(parents) equal segments of
    the `count` elements of `rows` (n, count). up: reduce toward the roots; down: broadcast from the roots.

    With down, every rank ends with what the roots hold, so the data is not copied stage by stage: the plan
    returns the roots' final values (count elements) for the caller to hand to every rank."""
    n, m = coll.n, len(parents)
    seg = -(-count // m)
    slices = choose_slices(seg * coll.itemsize)
    per = -(-seg // slices) if seg else 0
    starts = np.arange(m)[:, None] * seg + np.arange(slices)[None, :] * per
    ends = np.minimum(np.arange(m)[:, None] * seg + np.minimum((np.arange(slices)[None, :] + 1) * per, seg), count)
    true_bytes = np.clip(ends - starts, 0, None) * coll.itemsize  # (instance, slice)
    work = None
    if rows is not None and m * seg == count and slices * per == seg:
        work = rows.reshape(n, m, slices, per)  # no padding needed: reduce in place
    elif rows is not None:
        padded = np.zeros((n, m * seg), dtype=rows.dtype)
        padded[:, :count] = rows
        work = padded.reshape(n, m, seg)
        if slices * per != seg:
            work = np.concatenate([work, np.zeros((n, m, slices * per - seg), dtype=rows.dtype)], axis=2)
        work = work.reshape(n, m, slices, per)
    # Every tree edge, over all instances: child, parent, the child's depth, its tree's depth, sibling index.
    node = coll.ranks // (coll.placement.ranks_per_node or 1)
    child, par, dep, tdep, sib, inst, lag = [], [], [], [], [], [], []
    for i, parent in enumerate(parents):
        d = depths(parent)
        v = np.flatnonzero(parent >= 0)
        child.append(v)
        par.append(parent[v])
        dep.append(d[v])
        tdep.append(np.full(len(v), d.max()))
        sib.append(_sibling_index(parent)[v])
        inst.append(np.full(len(v), i))
        lag.append(_lag_estimate(parent, node)[v] + np.where(node[v] == node[parent[v]], 1.0, 10.0))
    child, par, dep, tdep, sib, inst, lag = (np.concatenate(x) for x in (child, par, dep, tdep, sib, inst, lag))
    depth = int(tdep.max()) if len(tdep) else 0
    stages = (depth if up else 0) + (depth if down else 0) + slices - 1
    # Latency clocks: one per (tree instance, slice), reused by slice j + window once slice j has left the
    # pipeline (it lives 2 * depth stages), which bounds the executor's clock array for huge buffers.
    window = min(slices, CLOCK_WINDOW_DEPTHS * max(depth, 1) + 4)
    for t in range(stages):
        srcs, dsts, sizes, chans, keys = [], [], [], [], []
        red = None
        if up:
            j = t - (tdep - dep)
            ok = (j >= 0) & (j < slices)
            ok &= true_bytes[inst, np.clip(j, 0, slices - 1)] > 0
            v, p, i, js, s = child[ok], par[ok], inst[ok], j[ok], sib[ok]
            b = true_bytes[i, js].astype(np.float64)
            srcs.append(v), dsts.append(p), sizes.append(b), chans.append((window - 1 - js % window) * m + i)
            keys.append(lag[ok])
            red = (p, b)
        if down:
            j = t - (tdep if up else 0) - (dep - 1)
            ok = (j >= 0) & (j < slices)
            ok &= true_bytes[inst, np.clip(j, 0, slices - 1)] > 0
            vd, pd, idn, jd = child[ok], par[ok], inst[ok], j[ok]
            srcs.append(pd), dsts.append(vd), sizes.append(true_bytes[idn, jd].astype(np.float64))
            chans.append((window - 1 - jd % window) * m + idn), keys.append(np.zeros(len(vd)))
        src, dst, nb = np.concatenate(srcs), np.concatenate(dsts), np.concatenate(sizes)
        if len(src):
            fs, fd, fb, w, flow = _merge(src, dst, nb, n)
            # Latency runs along each (tree instance, slice): its own clock per rank ("channel"), numbered so
            # that the first stage creates them all. Same-stage siblings: the likely-latest is listed last.
            ch = np.concatenate(chans)
            order = np.lexsort((np.concatenate(keys), ch))
            chains = (ch[order], src[order], dst[order], flow[order])
            st = step(fs, fd, fb, label=f"{label} stage {t + 1}/{stages}", weight=w, chains=chains)
        else:
            st = Step(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), label=f"{label} stage {t + 1}")
        if red is not None and len(red[0]):
            st.local_reduce = red
        yield st
        if work is not None and up:
            # Each (edge, slice) is one contiguous block: combine it in place, siblings in order (first child
            # first), which is the order the parent receives them in.
            for e in np.lexsort((v, s)).tolist():
                block = work[p[e], i[e], js[e]]
                combine(buf.op, block, work[v[e], i[e], js[e]], out=block)
    if work is None:
        return None
    if down:
        roots = np.array([int(np.flatnonzero(parent < 0)[0]) for parent in parents])
        return work[roots, np.arange(m)].reshape(-1)[:count]
    if work.base is not rows and work is not rows:
        rows[:] = work.reshape(n, -1)[:, :count]
    return None


# ---- plans ------------------------------------------------------------------------------------------------
def tree_all_reduce(coll: Collective, buf: Buffers):
    """NCCL's double binary tree: 2 trees x channels, each reducing its share up and broadcasting it down."""
    if coll.n == 1:
        return
    parents = double_tree_parents(coll)
    final = yield from pipelined_trees(coll, buf, parents, coll.count, True, True,
                                       buf.rows if buf.live else None, "tree all-reduce")
    if final is not None:
        buf.rows = np.broadcast_to(final, (coll.n, coll.count))


def tree_broadcast(coll: Collective, buf: Buffers):
    """Pipelined binary tree from the root: depth + slices - 1 stages."""
    if coll.n == 1:
        return
    final = yield from pipelined_trees(coll, buf, [rooted_tree_parent(coll)], coll.count, False, True,
                                       buf.rows if buf.live else None, "tree broadcast")
    if final is not None:
        buf.rows = np.broadcast_to(final, (coll.n, coll.count))


def tree_reduce(coll: Collective, buf: Buffers):
    """Pipelined binary tree toward the root: depth + slices - 1 stages; only the root's row is written."""
    if coll.n == 1:
        return
    rows = buf.rows.copy() if buf.live else None
    yield from pipelined_trees(coll, buf, [rooted_tree_parent(coll)], coll.count, True, False, rows,
                               "tree reduce")
    if rows is not None:
        buf.rows[coll.root] = rows[coll.root]


TREE_EFFICIENCY = 0.92  # NCCL tuning.cc: tree all_reduce busBw


def _predict_all_reduce(m: CostModel, coll: Collective) -> float:
    """NCCL's tree model: base + 2 * ((ppn - 1) * intraLat + log2i(nNodes) * interLat); busBw x 0.92, algbw half.

    busBw is the per-GPU link inside a node, and across nodes also what the node's NICs carry: on 2 nodes each
    node sends its data across once per direction (the two trees are each other's mirror), half what a ring
    sends (2(n-1)/n of it), so the NICs allow twice the ring's figure (NCCL's search likewise lets a 2-node tree
    run its intra-node bandwidth up to twice the inter-node one); on more nodes an interior node forwards to two
    children and the NICs allow the ring's figure."""
    size = float(coll.nbytes)
    depth = int(math.floor(math.log2(m.nodes))) if m.nodes > 1 else 0
    lat = m.proto.base_latency + 2 * ((m.ppn - 1) * m.intra_lat + depth * m.inter_lat)
    net = m.node_net * (2 if m.nodes == 2 else 1)
    bus = (m.intra_bw if m.nodes <= 1 else min(m.intra_bw, net)) * TREE_EFFICIENCY
    t = size / (m.proto_bw(bus) * 0.5)
    if not m.fused:  # gloo-style reductions, pipelined with the slices
        t = max(t, 3 * size / m.mem_bw)
    return lat + t


def _predict_rooted(m: CostModel, coll: Collective) -> float:
    """Broadcast/reduce down/up NCCL's binary tree from the root, pipelined: the worst root-leaf path's hop
    latencies, and the busiest rank's children (each gets the whole message) over its links."""
    n, size = m.n, float(coll.nbytes)
    parent = rooted_tree_parent(coll)
    node = np.asarray(coll.ranks) // m.rpn
    v = np.flatnonzero(parent >= 0)
    cross = node[v] != node[parent[v]]
    path = np.zeros(n)
    hop = np.where(cross, m.inter_lat, m.intra_lat)
    while True:  # relax level by level (the depth is about log2 n)
        nxt = path.copy()
        nxt[v] = path[parent[v]] + hop
        if np.array_equal(nxt, path):
            break
        path = nxt
    fan_intra = np.bincount(parent[v][~cross], minlength=n).max() if (~cross).any() else 0
    fan_cross = np.bincount(parent[v][cross], minlength=n).max() if cross.any() else 0
    t = max(fan_intra * size / m.proto_bw(m.intra_bw) if fan_intra else 0.0,
            fan_cross * size / m.proto_bw(min(m.intra_bw, m.path_bw)) if fan_cross else 0.0)
    red = 0.0 if m.fused or coll.kind == "broadcast" else 3 * 2 * size / m.mem_bw  # overlaps the next slice
    return float(path.max()) + max(t, red)


def predict_tree(m: CostModel, coll: Collective) -> float:
    return _predict_all_reduce(m, coll) if coll.kind == "all_reduce" else stepwise(_predict_rooted)(m, coll)


TREE = Algorithm("tree", {"all_reduce": tree_all_reduce, "broadcast": tree_broadcast, "reduce": tree_reduce},
                 predict_tree, lambda m, coll: 0.0, family="tree", nccl_kinds=("all_reduce",))
