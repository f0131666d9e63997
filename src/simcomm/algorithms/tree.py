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
flow. Small buffers use fewer channels, as NCCL does (MIN_CHANNEL_BYTES of the protocol per channel and tree).

Latency: each rank has a clock per tree instance and direction (the executor's `chains`), so a slice's latency
adds up along its own path, up then down (2D hops, NCCL's 2 * depth * hop latency). Stages run in lockstep for
bandwidth, like every plan; the steady state's identical stages are timed in closed form (tree_schedule.py).
"""
from __future__ import annotations

import functools

import numpy as np

from .base import Algorithm, stepwise
from .cost import CostModel, pipelined_end
from .plan import Buffers, Collective
from .tree_alone import alone as _alone
from .tree_schedule import choose_slices, depths, pipelined_trees, tree_fold
from .tree_shape import btree_parents, double_tree_parents, dtree_parents, head_stride, tree_channels

def rooted_tree_parent(coll: Collective) -> np.ndarray:
    """NCCL's binary tree over ranks relabelled so that the root is relative rank 0."""
    n = coll.n
    rel = btree_parents(n)
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
    if buf.unstacked:  # the result straight from the ranks' own arrays (tree_schedule.tree_fold)
        yield from pipelined_trees(coll, buf, parents, coll.count, True, True, None, "tree all-reduce")
        final = tree_fold(buf.sources, parents, coll.count, buf.op)
    else:
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


@functools.lru_cache(maxsize=64)
def _node_shapes(nodes: int) -> tuple[tuple[int, ...], tuple[tuple[tuple[int, int], ...], ...]]:
    """Each of the two node trees' depth, and the distinct (depth, child count) pairs a node has in them."""
    shapes = []
    for parent in dtree_parents(nodes):
        kids = np.bincount(parent[parent >= 0], minlength=nodes)
        shapes.append((depths(parent), kids))
    pairs = {tuple((int(d[k]), int(c[k])) for d, c in shapes) for k in range(nodes)}
    return tuple(int(d.max()) for d, _ in shapes), tuple(sorted(pairs))


def _stage_times(m: CostModel, channels: int, slices: int, slice_bytes: float, stride: int = 1) -> np.ndarray:
    """Seconds each lockstep stage of the double tree all-reduce takes: its busiest link's slices (a rank's
    NVLink sends, a NIC's sends for the heads that leave through it) over the link's bandwidth.

    In tree t, channel j, local rank q sits at position p = (q - h) mod ppn of its node's chain (h = j x stride,
    the head), so at depth d + p for a node at depth d: it sends up (p >= 1) from stage D - d - p and down
    (p <= ppn - 2) from D + d + p, each for `slices` stages; the head sends across to the parent node from D - d
    and to each child node from D + d. Nodes alike in both trees load their links alike, so one of each kind is
    counted. Under LL's cap a stage lasts at least its busiest rank's slices (NVLink and NIC sends together) at
    the cap."""
    ppn = m.ppn
    tree_depths, kinds = _node_shapes(m.nodes)
    deepest = [d + ppn - 1 for d in tree_depths]
    length = 2 * max(deepest) + slices
    q, j = np.arange(ppn), np.arange(channels)
    head = j * stride % ppn
    pos = (q[None, :] - head[:, None]) % ppn
    if m.nodes > 1:
        # uneven groups (costed as if every node had the most ranks): each rank its share of the node's NICs
        nic_of, rate = (m.local_nic, m.nic_rate) if len(m.local_nic) == ppn else (np.arange(ppn), m.rank_net)
    rank = np.broadcast_to(q, pos.shape)
    worst = np.zeros(length)
    for kind in kinds:
        nvlink, nic = np.zeros((ppn, length)), np.zeros((ppn, length))
        for (d, kids), top in zip(kind, deepest):
            for sends, start in ((pos >= 1, top - d - pos), (pos <= ppn - 2, top + d + pos)):
                np.add.at(nvlink, (rank[sends], start[sends]), 1.0)
                np.add.at(nvlink, (rank[sends], start[sends] + slices), -1.0)
            for count, start in ((d >= 1, top - d), (kids, top + d)):
                if count:
                    np.add.at(nic, (head, start), float(count))
                    np.add.at(nic, (head, start + slices), -float(count))
        busy = np.cumsum(nvlink, axis=1).max(axis=0) / m.proto_bw(m.intra_bw)
        if m.nodes > 1:
            per_nic = np.zeros((int(nic_of.max()) + 1, length))
            np.add.at(per_nic, nic_of, np.cumsum(nic, axis=1))
            busy = np.maximum(busy, per_nic.max(axis=0) / m.proto_bw(rate))
        sends = np.cumsum(nvlink + nic, axis=1).max(axis=0) * slice_bytes
        worst = np.maximum(worst, m.capped(busy * slice_bytes, sends))
    return worst[:2 * max(deepest) + slices - 1]


def _predict_all_reduce(m: CostModel, coll: Collective) -> float:
    """The simulated double tree: its lockstep stages (_stage_times) and the last slice's latency chain
    (cost.pipelined_end, each hop costing its stage's transfer and its latency).

    The plan's own shape: 2 trees x channels (fewer for small buffers), each instance's share cut into slices,
    2D + slices - 1 stages. The last slice climbs from the deepest chain's tail to the root and back down, starting
    each hop no earlier than its stage, so the latency hides behind the transfers only where the stages are long.
    NCCL's own formula charges 2 x ((ppn - 1) intra-node + log2(nodes) network) hop latencies and
    2 x size / (0.92 x busBw) in full; the simulated tree moves 2 (ppn - 1) / ppn of the size over each NVLink
    port when every rank heads a channel. Ranks spread unevenly over nodes are costed as if each node had the
    most."""
    size = float(coll.nbytes)
    members = max(1, m.ppn)
    channels = tree_channels(coll, m.nodes, members, m.proto.name)
    seg = -(-coll.count // (2 * channels))
    slices = choose_slices(seg * coll.itemsize)
    times = _stage_times(m, channels, slices, -(-seg // slices) * coll.itemsize, head_stride(coll, m.nodes, members))
    node_depth = max(_node_shapes(m.nodes)[0])
    lat = np.array([m.intra_lat] * (members - 1) + [m.inter_lat] * (2 * node_depth) + [m.intra_lat] * (members - 1))
    t = m.proto.base_latency + pipelined_end(times, times[slices - 1:slices - 1 + len(lat)] + lat, slices)
    if not m.fused:  # gloo-style reductions, pipelined with the slices
        t = max(t, m.proto.base_latency + 3 * size / m.mem_bw)
    return t


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
    t = float(m.capped(t, np.bincount(parent[v], minlength=n).max() * size))
    red = 0.0 if m.fused or coll.kind == "broadcast" else 3 * 2 * size / m.mem_bw  # overlaps the next slice
    return float(path.max()) + max(t, red)


def predict_tree(m: CostModel, coll: Collective) -> float:
    return _predict_all_reduce(m, coll) if coll.kind == "all_reduce" else stepwise(_predict_rooted)(m, coll)


TREE = Algorithm("tree", {"all_reduce": tree_all_reduce, "broadcast": tree_broadcast, "reduce": tree_reduce},
                 predict_tree, lambda m, coll: 0.0, family="tree", nccl_kinds=("all_reduce",),
                 alone={"all_reduce": _alone})
