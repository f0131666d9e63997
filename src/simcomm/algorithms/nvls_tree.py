"""NVLS-Tree (NCCL_ALGO=NVLSTree): all_reduce across nodes with NVLink SHARP inside each node and NCCL's two
complementary binary trees between the nodes.

Data layout: the buffer is cut into `slices` slices; slice j into one shard per local GPU (ppn of them), each shard
into two halves, one per tree. For every slice, in a pipeline:
  A  in-node NVLS reduction (nvls.py): every GPU sends the slice up to the switch, which returns shard l of the
     node's sum to local GPU l (slice up, slice / ppn down per GPU; nothing reduced in HBM);
  T  across nodes, the GPUs of one local index l (one NIC rail) form NCCL's double binary tree over the nodes
     (tree.py: dtree_parents), half a shard per tree: up, the parent reducing what it receives (in HBM), then down;
  C  in-node NVLS multicast: GPU l sends its finished shard up once and the switch writes it into every GPU of
     the node (slice / ppn up, slice down per GPU).
Stage t runs A on slice t, the tree edges of a child at depth d on slice t - 1 - D + d going up and t - D - d going
down (D: the deeper tree's depth), and C on slice t - 2D - 1, all at once as lockstep steps: in steady state the
NVLink ports carry A and C in both directions while the NICs carry the trees, as NCCL overlaps them. The
collective takes slices + 2D + 1 stages; the steady state's identical stages are one step repeated.

Latency: each rank keeps a clock per role (the executor's chains): A's result, each tree's up and down arrivals
and each tree's final multicast, so a slice's latency adds up along its path, NVLS hop, 2D network hops, NVLS hop,
as NCCL's pipeline has it, not once per stage. Flows inside the node pay NVLS's hop latency (25 us, as nvls.py),
those between nodes NVLS's network figure (18 us): the protocol of the "nvls" family, Simple only. The cluster's
tuning scales the whole collective by its NVLS efficiency, the tree's network flows included.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import AlgorithmError
from .base import Algorithm
from .cost import CostModel, pipelined_end
from .nvls import _reduce_rows, switch_routes
from .plan import Buffers, Collective, Step
from .reduce_ops import combine
from .tree import _node_shapes
from .tree_shape import node_members
from .nvls_tree_alone import alone as _alone
from .nvls_tree_layout import DOWN, FINAL, REDUCED, START, Layout, Shape

def why_not(cluster, coll: Collective) -> str | None:
    """Why NVLS-Tree cannot run this group on this cluster (None when it can)."""
    if cluster is None:
        return "nvls_tree needs the cluster (place the collective on a cluster)"
    if cluster.device.kind != "gpu":
        return f"nvls_tree needs GPUs on NVSwitch; {cluster.name} has {cluster.device.kind} ranks"
    if not cluster.template.nvls:
        return f"nvls_tree needs NVSwitches with NVLink SHARP; {cluster.name} has none"
    nodes, counts = np.unique(np.asarray(coll.ranks) // cluster.ranks_per_node, return_counts=True)
    if len(nodes) < 2:
        return "nvls_tree runs across nodes; this group is inside one node (nvls runs there)"
    if len(set(counts.tolist())) != 1 or counts[0] < 2:
        detail = ", ".join(f"node {a}: {b}" for a, b in list(zip(nodes.tolist(), counts.tolist()))[:6])
        return (f"nvls_tree needs the same number (2 or more) of the group's ranks on every node it touches; this "
                f"group has {detail}{', ...' if len(nodes) > 6 else ''}")
    return None


def nvls_tree_all_reduce(coll: Collective, buf: Buffers):
    reason = why_not(coll.placement.cluster, coll)
    if reason:
        raise AlgorithmError(reason)
    plan = _Plan(coll, buf)
    yield from plan.steps()
    if plan.work is not None:
        buf.rows = np.broadcast_to(plan.part[0].reshape(-1)[:coll.count], (coll.n, coll.count))
    elif buf.unstacked:
        buf.rows = np.broadcast_to(_fold(buf, plan.grid, plan.shape, plan.lay, coll.count), (coll.n, coll.count))


class _Plan:
    """NVLS-Tree's stages on the group (see the module docstring): each stage's flows, the runs of identical
    stages as one step repeated, and (with live buffers) each stage's data movement."""

    def __init__(self, coll: Collective, buf: Buffers):
        self.coll, self.buf = coll, buf
        self.cluster = coll.placement.cluster
        self.grid = grid = np.stack(node_members(coll))  # grid[k, l]: group rank of local GPU l on node k
        nn, ppn = grid.shape
        self.lay = lay = Layout(coll.count, ppn, coll.itemsize)
        self.shape = sh = Shape(nn)
        self.up_route, self.down_route = switch_routes(self.cluster, coll.ranks)
        self.local = np.empty(coll.n, dtype=np.int64)
        self.local[grid] = np.arange(ppn)[None, :]
        self.slice_bytes = lay.bytes.sum(axis=(1, 2))  # per slice
        self.shard_bytes = lay.bytes.sum(axis=2)  # (slice, shard)
        self.ranks = np.arange(coll.n)
        # per tree edge, going up then down, for every local index at once: sender, receiver (edge, direction,
        # local index), the clock rows written and read, whether the receiver reduces
        self.t_src = np.stack([grid[sh.child], grid[sh.parent]], axis=1)
        self.t_dst = np.stack([grid[sh.parent], grid[sh.child]], axis=1)
        self.t_write = np.broadcast_to(sh.write[:, :, None], self.t_src.shape)
        self.t_read = np.broadcast_to(sh.read[:, :, None], self.t_src.shape)
        self.t_reduce = np.broadcast_to(np.array([True, False])[None, :, None], self.t_src.shape)
        # the edges in the order a parent combines what its children send: by parent, then child
        self.combine_order = np.lexsort((sh.child, sh.parent))
        self.work = self.part = None
        if buf.live and not buf.unstacked:
            padded = np.zeros((coll.n, lay.slices * ppn * 2 * lay.per), dtype=buf.rows.dtype)
            padded[:, :coll.count] = buf.rows
            self.work = padded.reshape(coll.n, lay.slices, ppn, 2, lay.per)
            self.part = np.empty((nn, lay.slices, ppn, 2, lay.per), dtype=buf.rows.dtype)

    def steps(self):
        """Every stage's step, identical neighbours as one step repeated; the data moves after each run."""
        pending, run = None, []
        for t in range(self.lay.slices + 2 * self.shape.depth + 1):
            st = self.build(t)
            if st is not None and pending is not None and _same(st, pending):
                run.append(t)
                continue
            yield from self.flush(pending, run)
            pending, run = st, [t]
        yield from self.flush(pending, run)

    def flows(self, t: int) -> list[tuple]:
        """Stage t's flow sets: (src, dst, bytes, routes or None for rank to rank, the clock row written (-1: none)
        and the one read, whether the receiver reduces what it gets; the last three per flow or for the set)."""
        sh, slices, d_max = self.shape, self.lay.slices, self.shape.depth
        ranks, local = self.ranks, self.local
        out = []
        if t < slices:  # A on slice t: up from every GPU, its shard of the node's sum down
            out.append((ranks, ranks, np.full(self.coll.n, self.slice_bytes[t]), self.up_route, -1, -1, False))
            out.append((ranks, ranks, self.shard_bytes[t, local], self.down_route, REDUCED, START, False))
        j = np.stack([t - 1 - d_max + sh.depth_of, t - d_max - sh.depth_of], axis=1)  # slice going up, going down
        on = (j >= 0) & (j < slices)
        if on.any():  # the tree edges in order, each going up then down, zero bytes where idle
            nb = np.where(on[:, :, None], self.lay.bytes[np.clip(j, 0, slices - 1), :, sh.inst[:, None]], 0)
            out.append((self.t_src.reshape(-1), self.t_dst.reshape(-1), nb.reshape(-1), None,
                        self.t_write.reshape(-1), self.t_read.reshape(-1), self.t_reduce.reshape(-1)))
        j = t - 2 * d_max - 1
        if 0 <= j < slices:  # C on slice j: each GPU's shard up once, the whole slice down to every GPU
            out.append((ranks, ranks, self.shard_bytes[j, local], self.up_route, -1, -1, False))
            out.append((ranks, ranks, np.full(self.coll.n, self.slice_bytes[j]), self.down_route, FINAL, DOWN,
                        False))
        return out

    def build(self, t: int) -> Step | None:
        """Stage t's step (None where only padding would move): its flows, their clock chains and reductions."""
        parts = [f for f in self.flows(t) if (f[2] > 0).any()]
        if not parts:
            return None
        src, dst, nb, routes, red_who, red_bytes = [], [], [], [], [], []
        chains = ([], [], [], [], [])  # clock written, sender, receiver, flow, clock read
        at = 0
        for s, d, b, route, write, rd, reduces in parts:
            keep = b > 0
            s, d, b = s[keep], d[keep], b[keep]
            k = len(s)
            src.append(s)
            dst.append(d)
            nb.append(b.astype(np.float64))
            routes.append(route[keep] if route is not None else None)  # rank to rank: looked up at once below
            if np.ndim(write):
                write, rd, reduces = write[keep], rd[keep], reduces[keep]
                sets = ((write, rd),)
            else:  # the final multicast feeds one clock per tree (each reads its tree's down arrivals)
                sets = ((FINAL, DOWN), (FINAL + 1, DOWN + 1)) if write == FINAL else ((write, rd),)
            for w, r in sets:
                if np.ndim(w) == 0 and w < 0:
                    continue
                for column, x in zip(chains, (np.broadcast_to(w, k), s, d, np.arange(at, at + k),
                                              np.broadcast_to(r, k))):
                    column.append(x)
            if np.any(reduces):
                red_who.append(d[reduces] if np.ndim(reduces) else d)
                red_bytes.append((b[reduces] if np.ndim(reduces) else b).astype(np.float64))
            at += k
        self._route(src, dst, routes)
        cat = np.concatenate
        st = Step(cat(src), cat(dst), cat(nb), label="nvls-tree", routes=cat(routes),
                  chains=tuple(cat(column) for column in chains))
        if red_who:
            st.local_reduce = (cat(red_who), cat(red_bytes))
        return st

    def _route(self, src: list, dst: list, routes: list) -> None:
        """The routes of the rank-to-rank flow sets (None in `routes`), looked up at once."""
        pending = [i for i, r in enumerate(routes) if r is None]
        if not pending:
            return
        ranks = self.coll.ranks
        found = self.cluster.route_ids(ranks[np.concatenate([src[i] for i in pending])],
                                       ranks[np.concatenate([dst[i] for i in pending])])
        for i, r in zip(pending, np.split(found, np.cumsum([len(src[i]) for i in pending])[:-1])):
            routes[i] = r

    def compute(self, t: int) -> None:
        """Stage t's data movement (after its step is timed)."""
        sh, part, slices, d_max = self.shape, self.part, self.lay.slices, self.shape.depth
        if t < slices:
            for k in range(len(self.grid)):
                part[k, t] = _reduce_rows(self.buf, self.work[self.grid[k], t])
        for e in self.combine_order.tolist():
            i, c, p, d = int(sh.inst[e]), int(sh.child[e]), int(sh.parent[e]), int(sh.depth_of[e])
            j = t - 1 - d_max + d
            if 0 <= j < slices:
                combine(self.buf.op, part[p, j, :, i], part[c, j, :, i], out=part[p, j, :, i])
            j = t - d_max - d
            if 0 <= j < slices:
                part[c, j, :, i] = part[p, j, :, i]

    def flush(self, st: Step | None, run: list[int]):
        """Time the run of identical stages `run` as one step repeated (none where only padding moves), then move
        their data."""
        if st is not None:
            st.repeat = len(run)
            st.label = f"nvls-tree stage {run[0] + 1}" + (f"-{run[-1] + 1}" if len(run) > 1 else "")
            yield st
        if self.work is not None:
            for t in run:
                self.compute(t)


def _same(a: Step, b: Step) -> bool:
    """Whether two steps move the same flows with the same chains (and both reduce or neither)."""
    return all(np.array_equal(x, y) for x, y in ((a.src, b.src), (a.dst, b.dst), (a.nbytes, b.nbytes),
                                                 (a.routes, b.routes), *zip(a.chains, b.chains))) and \
        (a.local_reduce is None) == (b.local_reduce is None)


def _fold(buf: Buffers, grid: np.ndarray, shape: Shape, lay: Layout, count: int) -> np.ndarray:
    """The plan's result straight from the ranks' own arrays, with its bits: each node's switch sum in rank
    order, then up each node tree, a parent combining its children in index order, deepest first."""
    nn, ppn = grid.shape
    parts = np.zeros((nn, lay.slices * ppn * 2 * lay.per), dtype=buf.sources[0].dtype)
    for k in range(nn):
        parts[k, :count] = _reduce_rows(buf, [buf.sources[g] for g in grid[k]])
    view = parts.reshape(nn, lay.slices, ppn, 2, lay.per)
    out = np.empty_like(view[0])
    for i, parent in enumerate(shape.parents):
        for c in sorted(np.flatnonzero(parent >= 0).tolist(), key=lambda v: (-shape.depths[i][v], parent[v], v)):
            p = int(parent[c])
            combine(buf.op, view[p, :, :, i], view[c, :, :, i], out=view[p, :, :, i])
        out[:, :, i] = view[int(np.flatnonzero(parent < 0)[0]), :, :, i]
    return out.reshape(-1)[:count]


def _predict(m: CostModel, coll: Collective) -> float:
    """The simulated pipeline: slices + 2D + 1 lockstep stages, each as long as its busiest link (a GPU's switch
    link carrying A's slice and C's shard, or its NIC carrying the trees' half shards), and the last slice's
    latency chain (cost.pipelined_end): an NVLS hop, 2D network hops, an NVLS hop."""
    if m.proto.name != "Simple":
        return math.inf  # NCCL has no LL/LL128 NVLS-Tree
    cluster, ppn, nodes = m.cluster, m.ppn, m.nodes
    lay = Layout(coll.count, ppn, coll.itemsize)
    slices, half = lay.slices, float(lay.per * coll.itemsize)
    sl = 2 * ppn * half
    up, down = cluster.switch_links(int(coll.ranks[0]))
    switch_bw = float(min(cluster.link_capacity[up], cluster.link_capacity[down])) * m.proto.efficiency
    tree_depths, kinds = _node_shapes(nodes)
    d_max = max(tree_depths)
    stages = np.arange(slices + 2 * d_max + 1)

    def active(offset):
        return ((stages - offset >= 0) & (stages - offset < slices)).astype(float)
    a, c = active(0), active(2 * d_max + 1)
    t_nvlink = sl * np.maximum(a + c / ppn, a / ppn + c) / switch_bw
    sends = np.zeros((len(kinds), len(stages)))
    for row, kind in enumerate(kinds):
        for d, kids in kind:
            if d >= 1:
                sends[row] += active(1 + d_max - d)
            if kids:
                sends[row] += kids * active(d_max + d + 1)
    t_nic = sends.max(axis=0) * half / m.proto_bw(m.rank_net)
    times = np.maximum(t_nvlink, t_nic)
    # The last slice's hops, each its own flow's time in its stage: A's shard shares its down link with C's slice
    # (max-min: both at half rate until the shard is done), the trees' half shards share the NIC, and C's slice
    # comes down alone (A has finished).
    last = slices - 1
    nvls_lat = m.proto.hop(m.intra_kind) + float(cluster.link_latency[down])
    costs = np.concatenate([[(1 + c[last]) * sl / ppn / switch_bw + nvls_lat],
                            t_nic[last + 1:last + 1 + 2 * d_max] + m.inter_lat,
                            [sl / switch_bw + nvls_lat]])
    return m.proto.base_latency + pipelined_end(times, costs, slices)


NVLS_TREE = Algorithm("nvls_tree", {"all_reduce": nvls_tree_all_reduce}, _predict, lambda m, coll: 0.0, why_not,
                      family="nvls", nccl_kinds=("all_reduce",), alone={"all_reduce": _alone})
