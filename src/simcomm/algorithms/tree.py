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

Latency: each rank has a clock per tree instance and direction (the executor's `chains`), so a slice's latency
adds up along its own path, up then down (2D hops, NCCL's 2 * depth * hop latency). Stages run in lockstep for
bandwidth, like every plan; the steady state's identical stages are timed in closed form (tree_schedule.py).
"""
from __future__ import annotations

import math

import numpy as np

from .base import Algorithm, stepwise
from .cost import CostModel
from .plan import Buffers, Collective
from .tree_schedule import pipelined_trees

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
