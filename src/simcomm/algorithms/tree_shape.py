"""The shapes of NCCL's trees (src/graph/trees.cc and connect.cc): its binary tree over the nodes and the mirror or
shifted second tree, and the chains inside each node that hang from a channel's head; tree.py's plans run on them."""
from __future__ import annotations

import numpy as np

from .plan import Collective, channel_stride

# The fewest bytes NCCL gives a channel, by protocol: its threads x its per-thread threshold (init.cc's maxThreads
# and threadThresholds; enqueue.cc drops channels while nBytes < channels x threads x threshold): LL 512 x 8,
# LL128 640 x 8, Simple 512 x 64.
MIN_CHANNEL_BYTES = {"LL": 512 * 8, "LL128": 640 * 8, "Simple": 512 * 64}


# ---- tree shapes (ports of NCCL's ncclGetBtree / ncclGetDtree) ----------------------------------------------
def btree_parents(nranks: int) -> np.ndarray:
    """Parent of every rank 0..nranks-1 in NCCL's binary tree (ncclGetBtree; rank 0 is the root, with one child):
    with `bit` the rank's lowest set bit, (rank ^ bit) | (bit << 1), or rank ^ bit where that is out of range."""
    rank = np.arange(nranks, dtype=np.int64)
    bit = rank & -rank
    up = (rank ^ bit) | (bit << 1)
    parent = np.where(up >= nranks, rank ^ bit, up)
    if nranks:
        parent[0] = -1
    return parent


def dtree_parents(nranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Parents in NCCL's two complementary trees: the btree, and its mirror (even) or shift by one (odd)."""
    p0 = btree_parents(nranks)
    if nranks % 2 == 1:
        shifted = p0[(np.arange(nranks) - 1) % nranks]
        p1 = np.where(shifted < 0, -1, (shifted + 1) % nranks)
    else:
        mirrored = p0[nranks - 1 - np.arange(nranks)]
        p1 = np.where(mirrored < 0, -1, nranks - 1 - mirrored)
    return p0, p1


def node_members(coll: Collective) -> list[np.ndarray]:
    """Group ranks on each node the group touches (nodes in order, members by global rank)."""
    rpn = coll.placement.ranks_per_node or 1
    nodes = coll.ranks // rpn
    order = np.lexsort((coll.ranks, nodes))
    _, starts = np.unique(nodes[order], return_index=True)
    return np.split(order, starts[1:])


def tree_channels(coll: Collective, nodes: int, per_node: int, protocol: str = "") -> int:
    """Tree instances per direction: the placement's channels across nodes (a node's ranks inside one), at most
    one per rank of the smallest node, and, like NCCL, fewer for small messages (each channel needs enough bytes
    to keep its threads busy: MIN_CHANNEL_BYTES of the protocol, the placement's unless given; Simple's by
    default)."""
    channels = max(1, min(coll.placement.channels if nodes > 1 else per_node, per_node))
    least = MIN_CHANNEL_BYTES.get(protocol or coll.placement.protocol, MIN_CHANNEL_BYTES["Simple"])
    return max(1, min(channels, -(-coll.count * coll.itemsize // (2 * least))))


def head_stride(coll: Collective, nodes: int, per_node: int) -> int:
    """Channel c's head (the rank of a node that talks across nodes) is its local rank c x this stride
    (plan.channel_stride)."""
    return channel_stride(per_node, coll.placement.channels) if nodes > 1 else 1


def double_tree_parents(coll: Collective) -> list[np.ndarray]:
    """Parent arrays (over group ranks) of the tree instances NCCL's all-reduce uses: 2 trees x channels."""
    members = node_members(coll)
    nn = len(members)
    per_node = min(len(m) for m in members)
    channels = tree_channels(coll, nn, per_node)
    stride = head_stride(coll, nn, per_node)
    out = []
    sizes = {len(m) for m in members}
    grid = np.stack(members) if len(sizes) == 1 else None  # grid[k, l]: local rank l of node k, when all alike
    for node_parent in dtree_parents(nn):
        has = node_parent >= 0
        for c in range(channels):
            parent = np.full(coll.n, -1, dtype=np.int64)
            if grid is not None:
                chain = np.roll(grid, -c * stride, axis=1)  # each node's chain starts at this channel's head
                parent[chain[:, 1:]] = chain[:, :-1]
                parent[chain[has, 0]] = chain[node_parent[has], 0]
            else:
                heads = np.array([m[c * stride % len(m)] for m in members])
                for k, m in enumerate(members):
                    chain = np.roll(m, -c * stride)
                    parent[chain[1:]] = chain[:-1]
                    if node_parent[k] >= 0:
                        parent[chain[0]] = heads[node_parent[k]]
            out.append(parent)
    return out


