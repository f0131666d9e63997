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
    """The node trees: per tree, each node's parent, depth and whether it has children; D the deeper depth."""

    def __init__(self, nodes: int):
        self.parents = dtree_parents(nodes)
        self.depths = [depths(p) for p in self.parents]
        self.has_kids = [np.bincount(p[p >= 0], minlength=nodes) > 0 for p in self.parents]
        self.depth = int(max(d.max() for d in self.depths))


