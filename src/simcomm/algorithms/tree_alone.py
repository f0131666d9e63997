"""NCCL's double tree all-reduce in closed form when it runs alone (symmetric.py says what that takes).

Channel c's trees are channel 0's turned by c x stride local ranks, each on its own NIC rail; with as many channels
as the turns take to come round (every rank in every position), a rank's NVLink ports see the same loads in every
channel's turn, so channel 0 stands for all: its clocks are the others' turned. Per stage:
- NVLink: a node's chains depend only on its depth in each node tree (its kind): one node of each kind, with
  every channel's chain edges (channel 0's turned), merged by pair as the plan merges them;
- NICs: channel 0's head-to-head edges over every node on rail 0 (the other rails are its copies; the spine links
  they share are checked never to bind), merged by pair and size as the plan merges them;
- the executor's clocks of channel 0's two instances (the plan's own edge list and order), its reductions (every
  channel's up edges, turned, on each rank's memory) and the fused-reduction rule, stage after stage.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..engine.resources import reduction_bytes
from .plan import Collective
from .clock_sets import Clocks
from .symmetric import (Bookings, attempt, whole_nodes, Flows, NotSymmetric, per_rail, Rails, Reduced,
                        merge)
from .tree_shape import dtree_parents, head_stride, tree_channels
from .tree_schedule import _Edges, Slicing, depths


def _channel_zero(grid: np.ndarray, n: int) -> list[np.ndarray]:
    """Parent arrays (over group ranks) of channel 0's two trees: each node's chain from its local 0."""
    nn = len(grid)
    out = []
    for node_parent in dtree_parents(nn):
        parent = np.full(n, -1, dtype=np.int64)
        parent[grid[:, 1:]] = grid[:, :-1]
        has = node_parent >= 0
        parent[grid[has, 0]] = grid[node_parent[has], 0]
        out.append(parent)
    return out


class _Node:
    """The figures a symmetric node must have: per local rank, its NVSwitch up and down link (a route to another
    local rank is [up of the sender, down of the receiver]), and each channel head's path to its NIC and back."""

    def __init__(self, cluster, grid: np.ndarray, ranks: np.ndarray, heads: np.ndarray):
        ppn = grid.shape[1]
        g = ranks[grid[0]]  # node 0's ranks, by local index
        nxt = np.roll(g, -1)
        fwd = [cluster.route(int(a), int(b)) for a, b in zip(g, nxt)]
        back = [cluster.route(int(b), int(a)) for a, b in zip(g, nxt)]
        if ppn > 1 and any(len(r) != 2 for r in fwd + back):
            raise NotSymmetric("routes inside a node are not one hop up and one down through a switch")
        up = np.array([r[0] for r in fwd]) if ppn > 1 else np.empty(0, np.int64)
        down = np.roll(np.array([r[1] for r in fwd]), 1) if ppn > 1 else np.empty(0, np.int64)
        if ppn > 1 and not (np.array_equal([r[0] for r in back], np.roll(up, -1))
                            and np.array_equal([r[1] for r in back], down)):
            raise NotSymmetric("a local rank's switch ports differ by peer")
        cap, lat = cluster.link_capacity, cluster.link_latency
        for links in (up, down):
            if len(links) and (len(np.unique(cap[links])) > 1 or len(np.unique(lat[links])) > 1):
                raise NotSymmetric("local ranks' switch ports differ")
        self.up_cap, self.down_cap = (float(cap[x[0]]) if len(x) else 1.0 for x in (up, down))
        self.intra_latency = float(lat[up[0]] + lat[down[0]]) if ppn > 1 else 0.0
        self.nvlink = set(up.tolist()) | set(down.tolist())


@dataclass
class _Plan:
    """A stage's work that does not depend on when it starts (identical stages share it)."""

    flows: Flows  # the reduced flows (see _Run._stage)
    reduced: Reduced
    nic: tuple | None
    count: float  # flows of the full problem
    chains: tuple  # channel 0's active edges: clock written, sender, receiver, its reduced flow, clock read
    used: np.ndarray  # whether channel 0's edges ride each reduced flow
    latency: np.ndarray  # of each reduced flow
    reduce: np.ndarray | None  # HBM bytes each group rank reduces


class _Run:
    def __init__(self, sim, coll: Collective, proto, label: str, tags):
        cluster = sim.cluster
        self.sim, self.coll, self.proto, self.label, self.tags = sim, coll, proto, label, tags
        grid = whole_nodes(cluster, coll)
        nn, ppn = grid.shape
        channels = tree_channels(coll, nn, ppn)
        stride = head_stride(coll, nn, ppn)
        if channels * stride != ppn:
            raise NotSymmetric("the channels' turns do not come round")
        cut = Slicing(coll.count, 2 * channels, coll.itemsize)
        if not (cut.bytes == cut.bytes[0]).all():
            raise NotSymmetric("the instances' shares differ")
        self.slice_bytes, slices = cut.bytes[0], cut.slices
        self.grid, self.nn, self.ppn, self.channels, self.stride, self.slices = grid, nn, ppn, channels, stride, slices
        heads = np.arange(channels) * stride
        self.node = _Node(cluster, grid, coll.ranks, heads)
        self.hop_intra, self.hop_net = proto.hop(cluster.intra_node[2]), proto.hop("net")
        self.wire_factor = proto.wire_factor
        parents = _channel_zero(grid, coll.n)
        self.edges = _Edges(coll, parents, True, True)
        self.node_of = np.empty(coll.n, dtype=np.int64)
        self.node_of[grid] = np.arange(nn)[:, None]
        self.local_of = np.empty(coll.n, dtype=np.int64)
        self.local_of[grid] = np.arange(ppn)[None, :]
        e = self.edges
        self.inter = self.node_of[e.src] != self.node_of[e.dst]
        self.stages = 2 * e.depth + slices - 1
        self.sizes, self.slice_code = np.unique(self.slice_bytes, return_inverse=True)
        self.slice_code = self.slice_code.reshape(-1)
        self._kinds(parents)
        self.edge_ls, self.edge_ld = self.local_of[e.src], self.local_of[e.dst]
        self.edge_kind = self.kind_of[self.node_of[e.src]]
        self.on_rep = ~self.inter & (self.node_of[e.src] == self.rep[self.edge_kind])
        self.nv_own = (self.edge_kind * ppn + self.edge_ls) * ppn + self.edge_ld
        self.per_kind = np.bincount(self.kind_of, minlength=self.nk)
        if nn > 1:
            self._nics(cluster, heads)
        self.intra_latency = self.node.intra_latency + self.hop_intra
        self.latency = np.where(self.inter, self.hop_net, self.intra_latency)  # of each edge
        if nn > 1:
            inter = self.edge_pair_of >= 0
            self.latency[inter] = self.rails.latency[self.edge_pair_of[inter]] + self.hop_net

    # ---- set-up ------------------------------------------------------------------------------------------
    def _kinds(self, parents) -> None:
        """Nodes by kind (their depth in each node tree); reduced NVLink links: per kind, each local's up and
        down switch port."""
        grid, ppn = self.grid, self.ppn
        node_depth = np.stack([depths(p)[grid[:, 0]] for p in parents], axis=1)
        kinds, self.kind_of = np.unique(node_depth, axis=0, return_inverse=True)
        self.kind_of = self.kind_of.reshape(-1)
        self.rep = np.array([int(np.flatnonzero(self.kind_of == k)[0]) for k in range(len(kinds))])
        self.nk = len(kinds)
        # reduced link ids: kind k's up port of local l is k * 2 ppn + l, its down port k * 2 ppn + ppn + l
        self.nv_links = self.nk * 2 * ppn
        self.capacity = np.concatenate([np.tile(np.r_[np.full(ppn, self.node.up_cap),
                                                      np.full(ppn, self.node.down_cap)], self.nk)])

    def _nics(self, cluster, heads) -> None:
        """Rail 0's NIC traffic standing for every rail (symmetric.Rails): each inter-node edge's node pair."""
        e = self.edges
        inter = np.flatnonzero(self.inter)
        pairs = self.node_of[e.src[inter]] * self.nn + self.node_of[e.dst[inter]]
        self.pair_ids, edge_pair = np.unique(pairs, return_inverse=True)
        self.edge_pair_of = np.full(len(e.src), -1, dtype=np.int64)
        self.edge_pair_of[inter] = edge_pair.reshape(-1)
        self.rails = Rails(cluster, self.grid, self.coll.ranks, heads, self.pair_ids, self.node.nvlink,
                           self.capacity)
        self.capacity = self.rails.capacity

    # ---- the stages --------------------------------------------------------------------------------------
    def run(self) -> float:
        """Every stage in order; returns when the last clock is ready. The clocks are channel 0's while the
        channels agree; where a spine link makes the rails' flows (and so their clocks) part, every channel
        keeps its own, in channel 0's coordinates (the same edges; only the NIC flows' costs differ), until they
        agree again. A stage like the one before (the steady state) reuses its plan and its solves."""
        sim, coll = self.sim, self.coll
        t = float(sim.now)
        clocks = Clocks(4, coll.n, t)
        full_flows = 0.0
        self.memory = Bookings(sim.memory, coll.ranks)
        plan, key = None, None
        for stage in range(self.stages):
            now_key = self._key(stage)
            if now_key is None:
                continue
            if now_key != key:
                plan, key = self._plan(stage), now_key
            full_flows += plan.count
            if plan.nic is not None:
                rails = self.rails.finish(t, plan.flows, plan.reduced, plan.nic)
            else:
                rails = [plan.reduced.finish(t, plan.flows)]
            costs = per_rail(rails, lambda r: r - t + plan.latency)
            floor = t + min(float(c[plan.used].min()) for c in costs)
            clocks.advance(plan.chains, costs, t)
            t_end = max(float(r.max()) for r in rails)
            if plan.reduce is not None:
                t_end = self.memory.reductions(plan.reduce, t, floor, t_end, clocks, plan.chains)
            t = t_end
            clocks.settle()
            sim.network.stats["solves"] += plan.reduced.solves
        self.memory.commit(f"{self.label} reduce", self.tags)
        sim.network.stats["flows"] += int(full_flows)
        sim.network.stats["closed_form"] += 1
        return max(clocks.latest(), t)

    def _key(self, stage: int) -> bytes | None:
        """What a stage moves: the slice size (code) each distinct edge offset carries (-1: none), or None when
        nothing moves; stages with one key have one plan."""
        j = stage - self.edges.offsets
        code = np.full(len(j), -1, dtype=np.int64)
        ok = (j >= 0) & (j < self.slices)
        ok[ok] = self.slice_bytes[j[ok]] > 0
        code[ok] = self.slice_code[j[ok]]
        return code.tobytes() if ok.any() else None

    def _plan(self, stage: int) -> _Plan:
        """Stage `stage`'s flows, channel 0's chains over its active edges (each edge's reduced flow) and every
        rank's reductions: all that does not depend on when the stage starts."""
        e = self.edges
        j = stage - e.offset
        active = np.flatnonzero((j >= 0) & (j < self.slices))
        active = active[self.slice_bytes[j[active]] > 0]
        flows, reduced, edge_flow, nic, count = self._stage(active, j[active])
        latency = np.full(len(flows.route), self.intra_latency)
        latency[edge_flow] = self.latency[active]  # one latency per reduced flow: its node pair's or NVLink's
        chains = (e.wrow[active], e.src[active], e.dst[active], edge_flow, e.rrow[active])
        used = np.zeros(len(flows.route), dtype=bool)
        used[edge_flow] = True
        return _Plan(flows, reduced, nic, count, chains, used, latency,
                     self._reductions(active, self.slice_bytes[j[active]]))

    def _stage(self, active: np.ndarray, j: np.ndarray):
        """The stage's flows on the reduced links (NVLink of one node per kind with every channel's chain edges,
        channel 0's turned; rail 0's NIC flows), merged by pair and size as the plan merges them; which of them
        times each of channel 0's active edges; the NIC flows' node pairs and weights; the full stage's flows."""
        ppn, nk = self.ppn, self.nk
        code = self.slice_code[j]
        nsz = len(self.sizes)
        intra = ~self.inter[active]
        # NVLink: each kind's representative node, channel 0's edges turned by every channel's offset
        rep = self.on_rep[active]
        r_idx = active[rep]
        turn = (np.arange(self.channels) * self.stride)[:, None]
        cs = ((self.edge_ls[r_idx][None, :] + turn) % ppn).reshape(-1)
        cd = ((self.edge_ld[r_idx][None, :] + turn) % ppn).reshape(-1)
        nv_route = (np.tile(self.edge_kind[r_idx], self.channels) * ppn + cs) * ppn + cd
        nv_code = np.tile(code[rep], self.channels)
        nv_keys, nv_route, nv_code, nv_weight = merge(nv_route * nsz + nv_code, nv_route, nv_code)
        full = float((nv_weight * self.per_kind[nv_route // (ppn * ppn)]).sum())
        table = np.full(nk * ppn * ppn * nsz, -1, dtype=np.int64)
        table[nv_keys] = np.arange(len(nv_keys))
        edge_flow = np.empty(len(active), dtype=np.int64)
        edge_flow[intra] = table[self.nv_own[active[intra]] * nsz + code[intra]]
        k, a, b = nv_route // (ppn * ppn), nv_route // ppn % ppn, nv_route % ppn
        route_links = [np.stack([k * 2 * ppn + a, k * 2 * ppn + ppn + b], axis=1)]
        flow_route = np.arange(len(nv_keys))
        weight, wire = [nv_weight], [self.sizes[nv_code] * self.wire_factor]
        nic = None
        if not intra.all():
            pair = self.edge_pair_of[active[~intra]]
            key = pair * nsz + code[~intra]
            keys, inverse = np.unique(key, return_inverse=True)
            u_weight = np.bincount(inverse.reshape(-1)).astype(np.float64)
            u_pair, u_code = keys // nsz, keys % nsz
            edge_flow[~intra] = len(nv_keys) + inverse.reshape(-1)
            pairs, pair_route = np.unique(u_pair, return_inverse=True)
            route_links.append(self.rails.block(pairs))
            flow_route = np.r_[flow_route, len(nv_keys) + pair_route.reshape(-1)]
            weight.append(u_weight)
            wire.append(self.sizes[u_code] * self.wire_factor)
            full += float(u_weight.sum()) * self.channels
            nic = (len(nv_keys), u_pair, u_weight, pairs, pair_route.reshape(-1))
        reduced = Reduced(self.capacity, route_links)  # one route per row of each block
        return Flows(flow_route, np.concatenate(weight), np.concatenate(wire)), reduced, edge_flow, nic, full

    def _reductions(self, active: np.ndarray, nbytes: np.ndarray) -> np.ndarray | None:
        """HBM bytes each group rank reduces in the stage: every channel's up edges, channel 0's turned (None:
        no reductions)."""
        e = self.edges
        up = e.is_up[active]
        if not up.any():
            return None
        amount = np.bincount(e.dst[active][up], weights=reduction_bytes(nbytes[up]), minlength=self.coll.n)
        per_local = amount[self.grid]  # (node, local): channel 0's
        total = np.zeros_like(per_local)
        for c in range(self.channels):
            total += np.roll(per_local, c * self.stride, axis=1)
        per_rank = np.zeros(self.coll.n)
        per_rank[self.grid] = total
        return per_rank


# The tree all-reduce's closed form: when it ends, or None where the symmetry does not hold.
alone = partial(attempt, _Run)
