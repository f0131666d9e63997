"""NVLS-Tree all-reduce in closed form when it runs alone (symmetric.py says what that takes).

Every GPU's NVSwitch ports carry its own NVLS traffic (A up and down, C up and down) and nothing else, alike on
every GPU; local index l's node trees run on NIC rail l, alike for every l (the spine links the rails share are
checked, and a stage that would overload one is solved with every rail). So one GPU's ports stand for all, and
local 0's trees over every node for every local index: per stage the engine's rules for a batch alone on the
reduced links, and the executor's clocks (one per role, as the plan's chains) and reductions for local 0's ranks.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ..engine.resources import reduction_bytes
from .nvls_tree_layout import DOWN, FINAL, REDUCED, START, Layout, Shape
from .plan import Collective
from .clock_sets import Clocks
from .symmetric import Bookings, attempt, whole_nodes, Flows, NotSymmetric, per_rail, Rails, Reduced


class _Run:
    def __init__(self, sim, coll: Collective, proto, label: str, tags):
        cluster = sim.cluster
        self.sim, self.coll, self.proto, self.label, self.tags = sim, coll, proto, label, tags
        self.grid = grid = whole_nodes(cluster, coll, nodes=2)
        self.nn, self.ppn = nn, ppn = grid.shape
        self.lay = lay = Layout(coll.count, ppn, coll.itemsize)
        if not (lay.true == lay.true[:, :1, :]).all():
            raise NotSymmetric("the local indices' shards differ")
        self.shape = Shape(nn)
        self.slice_bytes = lay.bytes.sum(axis=(1, 2)).astype(np.float64)
        self.shard_bytes = lay.bytes[:, 0, :].sum(axis=1).astype(np.float64)  # local 0's (all alike)
        ranks = coll.ranks[grid[0]]
        up, down = cluster.switch_ports(ranks)
        cap, lat = cluster.link_capacity, cluster.link_latency
        for links in (up, down):
            if len(np.unique(cap[links])) > 1 or len(np.unique(lat[links])) > 1 or len(np.unique(links)) < ppn:
                raise NotSymmetric("the GPUs' switch ports differ")
        self.latency_up = float(lat[up[0]]) + proto.hop(cluster.intra_node[2])
        self.latency_down = float(lat[down[0]]) + proto.hop(cluster.intra_node[2])
        self.hop_net = proto.hop("net")
        self.wire = proto.wire_factor
        # each node-tree edge going up then down (the plan's order): sender node, receiver node, clock written and
        # read, reduces
        sh = self.shape
        self.e_inst, self.e_depth = sh.inst, sh.depth_of
        self.t_src = np.stack([sh.child, sh.parent], axis=1).reshape(-1)
        self.t_dst = np.stack([sh.parent, sh.child], axis=1).reshape(-1)
        self.t_write, self.t_read = sh.write.reshape(-1), sh.read.reshape(-1)
        self.t_up = np.tile([True, False], len(sh.inst))
        pairs = self.t_src * nn + self.t_dst
        pair_ids, self.t_pair = np.unique(pairs, return_inverse=True)
        self.t_pair = self.t_pair.reshape(-1)
        base = np.array([cap[up[0]], cap[down[0]]], dtype=np.float64)  # reduced links 0, 1: one GPU's ports
        self.rails = Rails(cluster, grid, coll.ranks, np.arange(ppn), pair_ids, set(up.tolist()) |
                           set(down.tolist()), base)
        self.t_latency = self.rails.latency[self.t_pair] + self.hop_net
        self.stages = lay.slices + 2 * sh.depth + 1

    def run(self) -> float:
        """Every stage in order; returns when the last clock is ready. The clocks are local 0's (one per node),
        as many sets as the rails need (symmetric: one)."""
        sim, nn = self.sim, self.nn
        t = float(sim.now)
        clocks = Clocks(1, nn, t)
        self.memory = Bookings(sim.memory, self.coll.ranks)
        count = 0.0
        plan, key = None, None
        for stage in range(self.stages):
            now_key = self._key(stage)
            if now_key is None:
                continue
            if now_key != key:  # a stage like the one before (the steady state) reuses its plan and solves
                plan, key = self._stage(stage, now_key), now_key
            flows, reduced, chains, latency, nic, reduce = plan
            count += float(flows.weight.sum())
            rails = self.rails.finish(t, flows, reduced, nic)
            costs = per_rail(rails, lambda r: r - t + latency)
            floor = t + min(float(c.min()) for c in costs)
            clocks.advance(chains, costs, t)
            t = self._reduce(reduce, clocks, chains, t, floor, max(float(r.max()) for r in rails))
            clocks.settle()
            sim.network.stats["solves"] += reduced.solves
        self.memory.commit(f"{self.label} reduce", self.tags)
        sim.network.stats["flows"] += int(count * self.ppn * nn)
        sim.network.stats["closed_form"] += 1
        return max(clocks.latest(), t)

    def _key(self, t: int) -> tuple | None:
        """What stage t moves: the bytes of A's slice and shard, C's shard and slice (0: none) and of each tree
        edge going up and down (as bytes); None when nothing moves. Stages with one key have one plan."""
        lay, d_max, slices = self.lay, self.shape.depth, self.lay.slices
        a = (self.slice_bytes[t], self.shard_bytes[t]) if t < slices else (0.0, 0.0)
        j = t - 2 * d_max - 1
        c = (self.shard_bytes[j], self.slice_bytes[j]) if 0 <= j < slices else (0.0, 0.0)
        js = np.stack([t - 1 - d_max + self.e_depth, t - d_max - self.e_depth], axis=1).reshape(-1)
        on = (js >= 0) & (js < slices)
        tb = np.zeros(len(js))
        tb[on] = lay.bytes[js[on], 0, np.repeat(self.e_inst, 2)[on]]
        if max(*a, *c) <= 0 and not (tb > 0).any():
            return None
        return (*a, *c, tb.tobytes())

    def _stage(self, t: int, key: tuple):
        """Stage t on the reduced links: one GPU's A and C flows (the switch ports: links 0 up, 1 down) and local
        0's tree flows over every node (rail 0); the chains of local 0's ranks (one clock column per node, the
        plan's rows), each flow's latency, the NIC flows' node pairs, and the HBM bytes each group rank reduces
        (None: none)."""
        lay, sh, nn = self.lay, self.shape, self.nn
        slices, d_max = lay.slices, sh.depth
        nodes = np.arange(nn)
        route, nbytes, latency = [], [], []
        ch, fsrc, fdst, fidx, read = [], [], [], [], []

        def switch(link: int, size: float, lat: float, writes=()):
            if size <= 0:
                return
            k = len(route)
            route.append(link)
            nbytes.append(size)
            latency.append(lat)
            for w, r in writes:
                ch.append(np.full(nn, w))
                fsrc.append(nodes)
                fdst.append(nodes)
                fidx.append(np.full(nn, k))
                read.append(np.full(nn, r))
        if t < slices:  # A on slice t
            switch(0, self.slice_bytes[t], self.latency_up)
            switch(1, self.shard_bytes[t], self.latency_down, ((REDUCED, START),))
        j = t - 2 * d_max - 1
        if 0 <= j < slices:  # C on slice j
            switch(0, self.shard_bytes[j], self.latency_up)
            switch(1, self.slice_bytes[j], self.latency_down, ((FINAL, DOWN), (FINAL + 1, DOWN + 1)))
        first = len(route)
        tb = np.frombuffer(key[-1])
        tree = np.flatnonzero(tb > 0)
        nic = None
        blocks = [np.array(route, dtype=np.int64).reshape(-1, 1)]
        flow_route = np.arange(first)
        weights = [np.ones(first)]
        wires = [np.array(nbytes) * self.wire]
        lat = [np.array(latency)]
        reduce = None
        if len(tree):
            pairs, pair_route = np.unique(self.t_pair[tree], return_inverse=True)
            pair_route = pair_route.reshape(-1)
            blocks.append(self.rails.block(pairs))
            flow_route = np.r_[flow_route, first + pair_route]
            weights.append(np.ones(len(tree)))
            wires.append(tb[tree] * self.wire)
            lat.append(self.t_latency[tree])
            ch.append(self.t_write[tree])
            fsrc.append(self.t_src[tree])
            fdst.append(self.t_dst[tree])
            fidx.append(first + np.arange(len(tree)))
            read.append(self.t_read[tree])
            nic = (first, self.t_pair[tree], np.ones(len(tree)), pairs, pair_route)
            up = self.t_up[tree]
            if up.any():
                reduce = self._reductions(self.t_dst[tree][up], tb[tree][up])
        # the sets write different clocks (A's, the tree's, C's rows), so their order does not matter
        chains = tuple(np.concatenate(x) for x in (ch, fsrc, fdst, fidx, read))
        flows = Flows(flow_route, np.concatenate(weights), np.concatenate(wires))
        return flows, Reduced(self.rails.capacity, blocks), chains, np.concatenate(lat), nic, reduce

    def _reductions(self, who_node: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """The tree's reductions (receiving node, bytes; each local index alike) as HBM bytes per group rank."""
        per_node = np.bincount(who_node, weights=reduction_bytes(nbytes), minlength=self.nn)
        per_rank = np.zeros(self.coll.n)
        per_rank[self.grid] = per_node[:, None]
        return per_rank

    def _reduce(self, per_rank, clocks, chains, t0: float, floor: float, t_end: float) -> float:
        """The tree's reductions on every receiving GPU's memory and the executor's rule for fused ones; returns
        when the next stage starts."""
        if per_rank is None:
            return t_end
        return self.memory.reductions(per_rank, t0, floor, t_end, clocks, chains, column=self.grid[:, 0])


# The NVLS-Tree all-reduce's closed form: when it ends, or None where the symmetry does not hold.
alone = partial(attempt, _Run)
