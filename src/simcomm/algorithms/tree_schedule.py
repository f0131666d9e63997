"""The pipelined schedule of tree collectives: every edge of every tree instance, slice by slice, stage by stage.

A rank at depth d (of a tree of depth D) sends slice j up to its parent at stage (D - d) + j, after its children's
slice j arrived; the root starts sending slice j down at stage D + j, and a rank at depth d forwards it at stage
D + d + j. Each edge thus has an offset (the stage slice 0 crosses it) and carries slice `stage - offset`.

Latency clocks. Each rank keeps one clock per tree instance and direction: when the latest slice arrived there
going up, and going down (the root's children write into the root's down clock, which its down edges read). A
rank forwards slices in order on each connection, as NCCL does, so the latest arrival is the one the next send
waits for; latency adds up along each slice's path, up then down, without leaking between the two directions.
With every clock fixed per rank, the stages of the steady state (every edge busy with a full slice) are one step
repeated, which the executor times in closed form: a 16,384-GPU all-reduce pays step by step only for the
pipeline's fill and drain.

Per stage the work is O(edges) with no sort: edges are ordered once (by clock, then by the static guess of which
sibling arrives last), and identical flows of a stage (channels whose chains share rank pairs) are merged by a
count over pair ids found once.
"""
from __future__ import annotations

import math

import numpy as np

from ..arrays import unique
from .plan import Buffers, Collective, Step, step
from .reduce_ops import combine

SLICE_BYTES = 128 << 10  # target bytes per slice and tree instance (NCCL pipelines in chunks of this order)
MAX_SLICES = 128  # caps the stage count (and so the events) for huge buffers
_MAX_SIZE_CODES = 8  # distinct slice sizes merged by counting; more (uneven tiny buffers) go through a sort


def choose_slices(nbytes_per_instance: float) -> int:
    return int(min(MAX_SLICES, max(1, math.ceil(nbytes_per_instance / SLICE_BYTES))))


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


def _sibling_index(parent: np.ndarray) -> np.ndarray:
    """Position of each vertex among its parent's children (0, 1, ...), so same-parent reductions can be ordered."""
    order = np.lexsort((np.arange(len(parent)), parent))
    p = parent[order]
    first = np.r_[True, p[1:] != p[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(p)), 0))
    sib = np.empty(len(parent), dtype=np.int64)
    sib[order] = np.arange(len(p)) - start
    return sib


def _lag_estimate(parent: np.ndarray, node: np.ndarray) -> np.ndarray:
    """A static guess of how late each vertex's partial result is (hops to its deepest leaf, an inter-node hop
    counting as 10). The executor keeps the LAST of several same-step arrivals at one clock, so siblings feeding
    one parent are listed by this guess plus their own hop, the likely-latest last."""
    d = depths(parent)
    lag = np.zeros(len(parent))
    for level in range(int(d.max()), 0, -1):
        v = np.flatnonzero(d == level)
        hop = np.where(node[v] == node[parent[v]], 1.0, 10.0)
        np.maximum.at(lag, parent[v], lag[v] + hop)
    return lag


def _merge_sorted(src, dst, nbytes, n: int):
    """Identical flows (same src, dst, size) as one weighted flow, by sorting (the general case)."""
    sizes, size_code = np.unique(nbytes, return_inverse=True)
    key = (size_code.reshape(-1) * n + src) * n + dst
    uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    pair = uniq % (n * n)
    return pair // n, pair % n, sizes[uniq // (n * n)], counts.astype(np.float64), inverse.reshape(-1)


class _Edges:
    """Every edge of every tree instance in the directions the collective uses, listed once in chain order:
    by the clock written, then by the lag guess (see _lag_estimate)."""

    def __init__(self, coll: Collective, parents: list[np.ndarray], up: bool, down: bool):
        n, m = coll.n, len(parents)
        node = coll.ranks // (coll.placement.ranks_per_node or 1)
        child, par, dep, tdep, sib, inst, lag, is_root = [], [], [], [], [], [], [], []
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
            is_root.append(parent[parent[v]] < 0)
        child, par, dep, tdep, sib, inst, lag, is_root = (np.concatenate(x) for x in (child, par, dep, tdep, sib,
                                                                                       inst, lag, is_root))
        self.depth = int(tdep.max()) if len(tdep) else 0
        # Clock rows: down clocks 0..m-1, up clocks m..2m-1 (the first stage, going up, lists the highest rows,
        # so the executor creates every row at the collective's start).
        parts = []  # (src, dst, offset, write row, read row, key, is_up)
        if up:
            wrow = np.where(is_root, inst, m + inst) if down else m + inst
            parts.append((child, par, tdep - dep, wrow, m + inst, lag, np.ones(len(child), bool)))
        if down:
            parts.append((par, child, (tdep if up else 0) + dep - 1, inst, inst, np.zeros(len(child)),
                          np.zeros(len(child), bool)))
        cols = [np.concatenate(c) for c in zip(*parts)]
        order = np.lexsort((cols[5], cols[3]))
        self.src, self.dst, self.offset, self.wrow, self.rrow, _, self.is_up = (c[order] for c in cols)
        self.inst = np.concatenate([inst] * len(parts))[order]
        self.sib = np.concatenate([sib] * len(parts))[order]
        pair_keys = self.src * n + self.dst
        pairs, self.pair = np.unique(pair_keys, return_inverse=True)
        self.pair = self.pair.reshape(-1)
        self.pair_src, self.pair_dst = pairs // n, pairs % n
        self.offsets = unique(self.offset)


class Slicing:
    """`count` elements over m tree instances, pipelined: instance i owns elements [i seg, (i + 1) seg) (the
    last may fall short), cut into `slices` slices of `per`; bytes[i, j] is what slice j of instance i really
    holds (padding excluded)."""

    def __init__(self, count: int, m: int, itemsize: int):
        self.count, self.m = count, m
        self.seg = seg = -(-count // m)
        self.slices = slices = choose_slices(seg * itemsize)
        self.per = per = -(-seg // slices) if seg else 0
        starts = np.arange(m)[:, None] * seg + np.arange(slices)[None, :] * per
        ends = np.minimum(np.arange(m)[:, None] * seg + np.minimum((np.arange(slices)[None, :] + 1) * per, seg),
                          count)
        self.bytes = (np.clip(ends - starts, 0, None) * itemsize).astype(np.float64)  # (instance, slice)

    def blocks(self, rows: np.ndarray) -> np.ndarray:
        """rows (n, count) as (n, instance, slice, element) blocks: a view where no padding is needed (reduced in
        place), else a zero-padded copy."""
        n, m, seg, slices, per = len(rows), self.m, self.seg, self.slices, self.per
        if m * seg == self.count and slices * per == seg:
            return rows.reshape(n, m, slices, per)
        padded = np.zeros((n, m * seg), dtype=rows.dtype)
        padded[:, :self.count] = rows
        work = padded.reshape(n, m, seg)
        if slices * per != seg:
            work = np.concatenate([work, np.zeros((n, m, slices * per - seg), dtype=rows.dtype)], axis=2)
        return work.reshape(n, m, slices, per)


def pipelined_trees(coll: Collective, buf: Buffers, parents: list[np.ndarray], count: int, up: bool, down: bool,
                    rows: np.ndarray | None, label: str):
    """Run the tree instances `parents` pipelined; instance i owns the i-th of len(parents) equal segments of
    the `count` elements of `rows` (n, count). up: reduce toward the roots; down: broadcast from the roots.

    With down, every rank ends with what the roots hold, so the data is not copied stage by stage: the plan
    returns the roots' final values (count elements) for the caller to hand to every rank."""
    cut = Slicing(count, len(parents), coll.itemsize)
    work = cut.blocks(rows) if rows is not None else None
    stages = _Stages(coll, parents, up, down, cut, label)
    t = 0
    while t < stages.count:
        st, run = stages.step(t)
        yield st
        if work is not None and up:
            for s in range(t, t + run):
                _reduce_stage(work, buf, stages.edges, s, cut.slices, cut.bytes)
        t += run
    if work is None:
        return None
    if down:
        roots = np.array([int(np.flatnonzero(parent < 0)[0]) for parent in parents])
        return work[roots, np.arange(len(parents))].reshape(-1)[:count]
    if work.base is not rows and work is not rows:
        rows[:] = work.reshape(coll.n, -1)[:, :count]
    return None


class _Stages:
    """The pipeline's stages as steps: a run of stages where every edge carries a full slice is one step
    repeated; the others each a step of their own over the edges that carry data."""

    def __init__(self, coll: Collective, parents: list[np.ndarray], up: bool, down: bool, cut: Slicing,
                 label: str):
        self.n, self.cut, self.label = coll.n, cut, label
        self.edges = e = _Edges(coll, parents, up, down)
        self.count = (e.depth if up else 0) + (e.depth if down else 0) + cut.slices - 1
        self.sizes, code = np.unique(cut.bytes, return_inverse=True)
        self.size_code = code.reshape(cut.bytes.shape)
        full_size = cut.bytes[0, 0]
        self.column_full = (cut.bytes == full_size).all(axis=0) & (full_size > 0)  # slice j: full everywhere

    def full(self, t: int) -> bool:
        """Whether every edge carries a full slice in stage t."""
        j = t - self.edges.offsets
        return bool(((j >= 0) & (j < self.cut.slices)).all() and self.column_full[j].all())

    def step(self, t: int) -> tuple[Step, int]:
        """The step from stage t and how many stages it stands for."""
        if self.full(t):
            run = 1
            while t + run < self.count and self.full(t + run):
                run += 1
            return self.build(t, None, run), run
        e, slices = self.edges, self.cut.slices
        j = t - e.offset
        ok = (j >= 0) & (j < slices)
        ok[ok] = self.cut.bytes[e.inst[ok], j[ok]] > 0
        if ok.any():
            return self.build(t, ok), 1
        return Step(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), label=f"{self.label} stage {t + 1}"), 1

    def build(self, t: int, mask: np.ndarray | None, repeat: int = 1) -> Step:
        """The step of stage t over the edges in mask (None: all, each with a full slice)."""
        e, sizes = self.edges, self.sizes
        idx = np.arange(len(e.src)) if mask is None else np.flatnonzero(mask)
        code = self.size_code[e.inst[idx], t - e.offset[idx]]
        src, dst = e.src[idx], e.dst[idx]
        if len(sizes) <= _MAX_SIZE_CODES:
            fs, fd, fb, w, flow = self._merge_counted(code, e.pair[idx])
        else:
            fs, fd, fb, w, flow = _merge_sorted(src, dst, sizes[code], self.n)
        chains = (e.wrow[idx], src, dst, flow, e.rrow[idx])
        name = f"{self.label} stage {t + 1}/{self.count}" if repeat == 1 else \
            f"{self.label} stages {t + 1}-{t + repeat} of {self.count}"
        st = step(fs, fd, fb, label=name, weight=w, chains=chains, repeat=repeat)
        upi = idx[e.is_up[idx]]
        if len(upi):
            st.local_reduce = (e.dst[upi], sizes[self.size_code[e.inst[upi], t - e.offset[upi]]])
        return st

    def _merge_counted(self, code: np.ndarray, pair: np.ndarray):
        """Identical flows as one weighted flow: (size, src, dst) keys in ascending order, as a sort would give,
        by counting over pair ids."""
        e = self.edges
        npairs = len(e.pair_src)
        key = code * npairs + pair
        counts = np.bincount(key, minlength=len(self.sizes) * npairs)
        present = np.flatnonzero(counts)
        position = np.full(len(counts), -1, dtype=np.int64)
        position[present] = np.arange(len(present))
        return (e.pair_src[present % npairs], e.pair_dst[present % npairs], self.sizes[present // npairs],
                counts[present].astype(np.float64), position[key])


def _reduce_stage(work: np.ndarray, buf: Buffers, e: _Edges, t: int, slices: int, true_bytes: np.ndarray) -> None:
    """Stage t's reductions on the data: each (up edge, slice) block combined into the parent's, in place,
    siblings in order (first child first), which is the order the parent receives them in."""
    j = t - e.offset
    ok = e.is_up & (j >= 0) & (j < slices)
    ok[ok] = true_bytes[e.inst[ok], j[ok]] > 0
    idx = np.flatnonzero(ok)
    v, p, i, js, s = e.src[idx], e.dst[idx], e.inst[idx], j[idx], e.sib[idx]
    for k in np.lexsort((v, s)).tolist():
        block = work[p[k], i[k], js[k]]
        combine(buf.op, block, work[v[k], i[k], js[k]], out=block)


def tree_fold(sources: list[np.ndarray], parents: list[np.ndarray], count: int, op) -> np.ndarray:
    """The (count,) all-reduce result the tree instances `parents` compute, straight from the ranks' own arrays.

    Instance i owns the i-th of len(parents) equal segments. A rank's partial result is its own segment combined
    with its children's partial results, children in index order (the order pipelined_trees combines siblings);
    the roots' partials are the result. Only the ranks with children get a working copy, each freed once its
    parent has it: no stacked copy of every rank's data (tests check the same bits as the step-by-step plan)."""
    m = len(parents)
    seg = -(-count // m)
    out = np.empty(count, dtype=sources[0].dtype)
    for i, parent in enumerate(parents):
        lo, hi = i * seg, min((i + 1) * seg, count)
        if lo >= hi:
            continue
        children: dict[int, list[int]] = {}
        for v in np.flatnonzero(parent >= 0).tolist():  # ascending: each parent's children in index order
            children.setdefault(int(parent[v]), []).append(v)
        root = int(np.flatnonzero(parent < 0)[0])
        out[lo:hi] = _partial(root, children, sources, lo, hi, op)
    return out


def _partial(v: int, children: dict, sources: list[np.ndarray], lo: int, hi: int, op) -> np.ndarray:
    """Rank v's partial result on elements [lo, hi): its own slice (a view when it has no children)."""
    kids = children.get(v)
    if not kids:
        return sources[v][lo:hi]
    acc = sources[v][lo:hi].copy()
    stack = [(v, acc, iter(kids))]
    while stack:  # depth first without recursion: trees inside nodes are chains as long as the node is wide
        u, acc_u, rest = stack[-1]
        c = next(rest, None)
        if c is None:
            stack.pop()
            if stack:
                combine(op, stack[-1][1], acc_u, out=stack[-1][1])
            continue
        if children.get(c):
            stack.append((c, sources[c][lo:hi].copy(), iter(children[c])))
        else:
            combine(op, acc_u, sources[c][lo:hi], out=acc_u)
    return acc

