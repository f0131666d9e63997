"""NVLS-Tree's data layout and node trees (nvls_tree.py's plan and nvls_tree_alone.py's closed form share them)."""
from __future__ import annotations

import numpy as np

from .tree_schedule import choose_slices, depths
from .tree_shape import dtree_parents

# Clock rows (chains): 0 the collective's start (never written), 1 A's result, then per tree i: its up arrivals,
# its down arrivals (a root's children write its down clock), and its final multicast.
START, REDUCED, UP, DOWN, FINAL = 0, 1, 2, 4, 6


class Layout:
    """Elements (slice j, shard l, half i, e) of the padded buffer, slice-major so that padding falls in the last
    slices; `true[j, l, i]` is how many of each part's `per` elements are real."""

    def __init__(self, count: int, ppn: int, itemsize: int):
        self.slices = choose_slices(count * itemsize / (2 * ppn))
        self.per = max(1, -(-count // (self.slices * ppn * 2)))
        base = np.arange(self.slices * ppn * 2).reshape(self.slices, ppn, 2) * self.per
        self.true = np.clip(count - base, 0, self.per)
        self.bytes = self.true * itemsize  # (slices, ppn, 2)


class Shape:
    """The node trees: per tree, each node's parent, depth and whether it has children; D the deeper depth.

    Their edges, tree by tree and child by child: `inst` (the tree), `child`, `parent` (nodes), `depth` (the
    child's); each edge carries data up (direction 0) and down (1): `write[e, k]` is the clock row the receiver
    writes and `read[e, k]` the one the sender reads (a root's children write its down clock; a leaf sends A's
    result up)."""

    def __init__(self, nodes: int):
        self.parents = dtree_parents(nodes)
        self.depths = [depths(p) for p in self.parents]
        self.has_kids = [np.bincount(p[p >= 0], minlength=nodes) > 0 for p in self.parents]
        self.depth = int(max(d.max() for d in self.depths))
        children = [np.flatnonzero(p >= 0) for p in self.parents]
        self.inst = np.concatenate([np.full(len(c), i, dtype=np.int64) for i, c in enumerate(children)])
        self.child = np.concatenate(children)
        self.parent = np.concatenate([p[c] for p, c in zip(self.parents, children)])
        self.depth_of = np.concatenate([d[c] for d, c in zip(self.depths, children)])
        root = np.concatenate([p[p[c]] < 0 for p, c in zip(self.parents, children)])
        kids = np.concatenate([k[c] for k, c in zip(self.has_kids, children)])
        self.write = np.stack([np.where(root, DOWN, UP) + self.inst, DOWN + self.inst], axis=1)
        self.read = np.stack([np.where(kids, UP + self.inst, REDUCED), DOWN + self.inst], axis=1)


