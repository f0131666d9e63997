"""Pipelined trees timed on one of each alike part, when they run alone: the machinery their closed forms share.

A tree all-reduce on 131,072 GPUs moves millions of flows per stage, and its pipeline's fill and drain are a few
dozen stages that differ: stage by stage on the engine that costs minutes. But when the collective has the
network and its ranks' memory to itself, its stages' max-min problems fall apart into pieces that share no link,
and most pieces are alike: every node of one kind (its depth in each node tree) loads its NVLink ports alike,
every NIC rail carries the same tree over the nodes (rails meet only at the spines, which must never bind), every
GPU's NVSwitch port carries the same NVLS traffic. The closed forms (tree_alone.py, nvls_tree_alone.py) solve one
of each piece per stage, with the engine's own solver and the engine's rules for a batch alone on the network
(rates re-solved when flows end, unless those share no link with the flows left; flows within a hair of their end
finish together), and keep the executor's latency clocks and reductions for one representative channel or rail.
The result is the stage-by-stage simulation's up to float rounding (tests compare them); anything the symmetry does
not cover (other traffic, memory in use, a fabric whose rails differ, spine links that would bind) keeps the
general path.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.ids import factorize
from ..engine.maxmin import max_min_rates_csr
from .hierarchical import node_grid

_SPINE_MARGIN = 1e-9  # a fabric link left out of a reduced problem may not exceed its capacity by more than this
# (relative): a link loaded exactly to capacity saturates in the same round as its flows' own bottlenecks


class NotSymmetric(Exception):
    """The closed form does not apply here (the general path runs instead)."""


def attempt(run, sim, coll, proto, label: str, tags) -> float | None:
    """A closed form's `run(sim, coll, proto, label, tags).run()`: when the collective ends, or None where the
    symmetry does not hold (NotSymmetric; nothing is booked then)."""
    cluster = sim.cluster
    if coll.kind != "all_reduce" or coll.n < 2 or not np.isinf(proto.max_rate) or \
            not cluster.device.fused_reduction:
        return None  # only fused, uncapped all-reduces: LL's cap and CPU reductions go step by step
    try:
        return run(sim, coll, proto, label, tags).run()
    except NotSymmetric:
        return None


def whole_nodes(cluster, coll, nodes: int = 1) -> np.ndarray:
    """The group as a (node, local index) grid of group ranks, in rank order, at least `nodes` nodes of whole
    nodes (else NotSymmetric)."""
    grid = node_grid(coll.ranks, cluster.ranks_per_node)
    if grid is None or len(grid) < nodes or not (np.diff(coll.ranks[grid], axis=1) > 0).all():
        raise NotSymmetric("the group must be whole nodes")
    return grid


def has_to_itself(sim) -> bool:
    """Whether a collective starting now has the simulation to itself until it ends: no other event is pending
    (so nothing can start before it does: a closed form schedules only its end), no flow is on the network, no
    memory booking is pending, only aggregated steps are recorded, and these closed forms are allowed."""
    net = sim.network
    return (sim.env.peek() == float("inf") and net.active_flows == 0 and not net._batches
            and not sim.memory._holds and sim.recorder.detail == "steps" and sim.closed_form and sim.symmetric)


@dataclass
class Flows:
    """A reduced stage's flows: each on reduced route `route` (CSR over reduced links), standing for `weight`
    identical flows of the full problem, with `wire` bytes to send."""

    route: np.ndarray
    weight: np.ndarray
    wire: np.ndarray


class Reduced:
    """Reduced links (capacities) and routes over them; `finish` times a stage's flows on them. Routes come in
    blocks, each a 2-D array with one route (its link ids) per row."""

    def __init__(self, capacity: np.ndarray, blocks: list[np.ndarray]):
        self.capacity = np.asarray(capacity, dtype=np.float64)
        self.lengths = np.concatenate([np.full(len(b), b.shape[1], dtype=np.int64) for b in blocks]) if blocks \
            else np.empty(0, np.int64)
        self.starts = np.cumsum(self.lengths) - self.lengths
        self.links = np.concatenate([b.reshape(-1) for b in blocks]).astype(np.int64) if blocks \
            else np.empty(0, np.int64)
        self.blocks = blocks
        self.solves = 0
        # for the flows `_solved_for` (identical stages time the same flows again): live flows (as bytes) -> their
        # rates and check's verdict; the flows on each link when all are live
        self._solved, self._solved_for, self._live_on = {}, None, None

    def _rates(self, route: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """Max-min rate of each route class, given the live flows on each (engine.maxmin, as the network)."""
        classes, inverse = factorize(route, len(self.lengths))
        counts = np.bincount(inverse, weights=weight)
        self.solves += 1
        return max_min_rates_csr(self.lengths[classes], self.starts[classes], self.links, counts,
                                 self.capacity)[inverse]

    def _on(self, route: np.ndarray) -> np.ndarray:
        """The reduced links the flows on these routes cross, end to end (repeats kept)."""
        counts = self.lengths[route]
        offsets = np.repeat(self.starts[route] - (np.cumsum(counts) - counts), counts)
        return self.links[np.arange(int(counts.sum())) + offsets]

    def _solve(self, flows: Flows, alive: np.ndarray, rate: np.ndarray, check) -> None:
        """The live flows' max-min rates into `rate`, and check's verdict on them into self.verdicts; solved
        once per set of live flows of these flows (the rates do not depend on when the stage starts)."""
        key = alive.tobytes()
        known = self._solved.get(key)
        if known is None:
            live = np.flatnonzero(alive)
            rate[live] = self._rates(flows.route[live], flows.weight[live])
            known = self._solved[key] = [rate[live].copy(), None]  # the rates, check's verdict once given
        rate[alive] = known[0]
        if check is not None:
            if known[1] is None:
                known[1] = check(rate, alive)  # a refusal (raised) is not kept: it ends the stage's timing
            self.verdicts.append(known[1])

    def finish(self, t0: float, flows: Flows, check=None) -> np.ndarray:
        """When each flow sends its last byte, all starting at t0 alone on their links (FlowNetwork's rules);
        `check(rates, alive)` may refuse a solution (by raising) and returns a verdict on it: self.verdicts lists
        them, one per solve."""
        n = len(flows.route)
        finish = np.full(n, np.nan)
        self.verdicts, self.solves = [], 0
        if not n:
            return finish
        remaining = flows.wire.astype(np.float64).copy()
        alive = np.ones(n, dtype=bool)
        if flows is not self._solved_for:
            self._solved, self._solved_for = {}, flows
            self._live_on = np.bincount(self._on(flows.route), minlength=len(self.capacity))
        live_on = self._live_on.copy()  # live flows per link
        rate = np.empty(n)
        self._solve(flows, alive, rate, check)
        now = updated = t0
        while True:
            live = np.flatnonzero(alive)
            with np.errstate(divide="ignore", invalid="ignore"):
                ttf = remaining[live] / rate[live]
            ttf[rate[live] == np.inf] = 0.0
            when = now + max(float(ttf.min()), 0.0)
            remaining[live] -= rate[live] * (when - updated)
            updated = when
            done = ttf <= (when - now) + 1e-12 * max(when, 1e-9) + 1e-18
            ended = live[done]
            finish[ended] = when
            alive[ended] = False
            if not alive.any():
                return finish
            freed = self._on(flows.route[ended])
            live_on -= np.bincount(freed, minlength=len(live_on))
            if (live_on[freed] > 0).any():  # max-min decomposes over flows that share no link
                self._solve(flows, alive, rate, check)
            now = when


def merge(keys: np.ndarray, *columns: np.ndarray):
    """Rows with equal keys as one (the first's columns) and how many each stands for."""
    uniq, first, counts = np.unique(keys, return_index=True, return_counts=True)
    return (uniq, *(c[first] for c in columns), counts.astype(np.float64))


class Spines:
    """The fabric links a reduced problem leaves out. Each rail's flows reach the spines by their own hashes, so a
    rail is its reduced twin only while none of its fabric links would be loaded past capacity. per_rail[c, f]:
    the fabric link ids node-level flow f crosses on rail c (-1, -1 where it stays on its leaf). On a
    rail-optimised fabric every fabric link belongs to one rail's leaf (`rail_of`); elsewhere rails may share
    links (`independent` False)."""

    def __init__(self, capacity: np.ndarray, per_rail: np.ndarray):
        self.capacity = capacity
        self.per_rail = per_rail
        self.crosses = (per_rail >= 0).any(axis=(0, 2))  # flows that reach a spine on some rail
        links = per_rail.reshape(len(per_rail), -1)
        rail = np.repeat(np.arange(len(per_rail)), links.shape[1])[links.reshape(-1) >= 0]
        used = links.reshape(-1)[links.reshape(-1) >= 0]
        ids, first = np.unique(used, return_index=True)
        owners = np.unique(np.stack([used, rail], axis=1), axis=0)
        self.independent = len(owners) == len(ids)  # no fabric link carries two rails' flows
        self.rail_of = dict(zip(ids.tolist(), rail[first].tolist()))

    def overloaded(self, flow_ids: np.ndarray, rates: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """The fabric links these node-level flows at these rates would load past their capacity, every rail's
        copy of the flows counted."""
        keep = self.crosses[flow_ids]
        if not keep.any():
            return np.empty(0, dtype=np.int64)
        links = self.per_rail[:, flow_ids[keep], :]  # (rails, flows, 2)
        on = links >= 0
        load = np.broadcast_to((rates[keep] * weight[keep])[None, :, None], links.shape)[on]
        ids, inverse = np.unique(links[on], return_inverse=True)
        total = np.bincount(inverse.reshape(-1), weights=load)
        return ids[total > self.capacity[ids] * (1 + _SPINE_MARGIN)]


class Bookings:
    """A collective's memory work booked on a copy of its ranks' queues (DeviceQueue.use's arithmetic), made real
    only by `commit`: a closed form that gives up half way leaves the queues untouched."""

    def __init__(self, queue, ranks: np.ndarray):
        self.queue, self.ranks = queue, np.asarray(ranks, dtype=np.int64)
        self.free = queue.free_at[self.ranks].copy()
        self.rows: list[tuple] = []

    def use(self, who: np.ndarray, amount: np.ndarray, now: float) -> np.ndarray:
        """Queue `amount` on group ranks `who` at `now`; their finish times."""
        start = np.maximum(self.free[who], now)
        end = start + amount / self.queue.rate
        self.free[who] = end
        self.rows.append((who, start, end, amount))
        return end

    def reductions(self, per_rank: np.ndarray, t0: float, floor: float, t_end: float, clocks,
                   chains: tuple, column=None) -> float:
        """A stage's fused reductions, `per_rank` bytes of HBM work on each group rank, issued at t0 (the
        executor's rule): those that end after `floor` (the earliest any of the stage's data could move on) hold
        up the clocks the chains wrote until their receiver's ends (`column`: the group rank of each clock column,
        where the clocks are a representative's). Returns when the next stage starts."""
        who = np.flatnonzero(per_rank)
        if not len(who):
            return t_end
        ends = self.use(who, per_rank[who], t0)
        top = float(ends.max())
        if top > floor:
            hbm = np.full(len(per_rank), -np.inf)
            hbm[who] = ends
            clocks.raise_to(chains, (hbm if column is None else hbm[column])[chains[2]])
        return max(t_end, top)

    def commit(self, label: str, tags) -> None:
        self.queue.free_at[self.ranks] = self.free
        recorder = self.queue.recorder
        if recorder is not None:
            for who, start, end, amount in self.rows:
                recorder.step_spans(self.queue.kind, self.ranks[who], start, end, amount, label, tags)


class Overloaded(Exception):
    """A stage's rails would overload a spine link: solve it with every rail (Rails.every_rail)."""


class Rails:
    """A tree's NIC traffic over the nodes, one rail standing for all: rail r joins node k's local heads[r] to
    node p's. Reduced links (after `base` NVLink ones): each node's path from its rail-0 head to its NIC and up
    (nic_out, its narrowest link) and back down from the NIC (nic_back). Every rail's path must have the same
    figures and share no link with another rail or with `nvlink`; each node pair's route latency and whether it
    reaches the spines must be alike on every rail (else NotSymmetric)."""

    def __init__(self, cluster, grid: np.ndarray, ranks: np.ndarray, heads: np.ndarray, pair_ids: np.ndarray,
                 nvlink: set, base: np.ndarray):
        self.nn = nn = len(grid)
        self.rails = len(heads)
        out_cap, back_cap = self._paths(cluster, grid, ranks, heads, nvlink)
        # A node's path out (to its NIC, up its port) carries exactly the node's flows on the rail, every link of
        # it the same load: only its narrowest can bind (ties saturate together), so it stands for the path; the
        # same for the path in.
        out_cap, back_cap = out_cap.min(keepdims=True), back_cap.min(keepdims=True)
        self.lo, self.lb = lo, lb = 1, 1
        self.base = len(base)
        self.nic_out = np.arange(nn)[:, None] * (lo + lb) + np.arange(lo)[None, :] + self.base
        self.nic_back = np.arange(nn)[:, None] * (lo + lb) + lo + np.arange(lb)[None, :] + self.base
        self.capacity = np.concatenate([base, np.tile(np.r_[out_cap, back_cap], nn)])
        self.s_node, self.d_node = s_node, d_node = pair_ids // nn, pair_ids % nn
        fabric = np.full((self.rails, len(pair_ids), 2), -1, dtype=np.int64)
        latency = None
        for r, h in enumerate(heads.tolist()):
            rids = cluster.route_ids(ranks[grid[s_node, h]], ranks[grid[d_node, h]])
            lat = cluster.route_latency[rids]
            if latency is None:
                latency = lat
            elif not np.array_equal(lat, latency):
                raise NotSymmetric("the rails' routes differ")
            on, counts = cluster.links_crossed(rids)
            fab = on >= cluster._fabric_base
            owner = np.repeat(np.arange(len(rids)), counts)
            per = np.bincount(owner, weights=fab, minlength=len(rids))
            if ((per != 0) & (per != 2)).any():
                raise NotSymmetric("a fabric route is not leaf, spine, leaf")
            fabric[r, owner[fab][::2]] = on[fab].reshape(-1, 2)
        if not ((fabric >= 0).all(axis=2) == (fabric[0] >= 0).all(axis=1)[None, :]).all():
            raise NotSymmetric("the rails do not cross the spines alike")
        self.latency = latency  # of each node pair's route
        self.spines = Spines(cluster.link_capacity, fabric)
        self._own, self._own_for = {}, None  # rail_finish's problems of the stage last timed

    @staticmethod
    def _paths(cluster, grid, ranks, heads, nvlink: set):
        """Per rail: the links of its route from node 0's head to node 1's, split as (to the NIC and its port
        up, its port down and from the NIC); alike figures, no link shared."""
        a, b = ranks[grid[0, heads]], ranks[grid[1, heads]]
        pieces, seen = [], set(nvlink)
        for s, d in zip(a.tolist(), b.tolist()):
            route = cluster.route(s, d)
            ports = np.flatnonzero((route >= cluster._port_base) & (route < cluster._fabric_base))
            if len(ports) != 2:
                raise NotSymmetric("a head's route does not leave and enter through one NIC port each")
            out, back = route[:ports[0] + 1], route[ports[1]:]
            mine = set(out.tolist()) | set(back.tolist())
            if mine & seen:
                raise NotSymmetric("rails share links on their way to the NICs")
            seen |= mine
            pieces.append((out, back))
        cap, lat = cluster.link_capacity, cluster.link_latency
        if len({(tuple(cap[o]), tuple(lat[o]), tuple(cap[k]), tuple(lat[k])) for o, k in pieces}) > 1:
            raise NotSymmetric("the rails' paths to their NICs differ")
        out, back = pieces[0]
        return cap[out], cap[back]

    def block(self, pairs: np.ndarray) -> np.ndarray:
        """Reduced routes of node pairs (indices into pair_ids; one row each): the sender's path out, the
        receiver's path in."""
        return np.concatenate([self.nic_out[self.s_node[pairs]], self.nic_back[self.d_node[pairs]]], axis=1)

    def check(self, rate: np.ndarray, alive: np.ndarray, first: int, pair: np.ndarray, weight: np.ndarray) -> set:
        """Rates of a reduced problem whose NIC flows (from `first` on, node pairs `pair`): the rails whose fabric
        links they would overload (each is solved on its own after: `finish`); where rails share fabric links,
        Overloaded."""
        live = alive[first:]
        over = self.spines.overloaded(pair[live], rate[first:][live], weight[live])
        if len(over) and not self.spines.independent:
            raise Overloaded()
        return {self.spines.rail_of[int(link)] for link in over}

    def finish(self, t0: float, flows: Flows, reduced: "Reduced", nic) -> list[np.ndarray]:
        """When each of a stage's reduced flows sends its last byte, as each rail sees it: one array when every
        rail is its reduced twin, else one per rail (NVLink flows alike in all). nic: (first NIC flow, their node
        pairs, weights, the distinct pairs, each NIC flow's pair) or None."""
        if nic is None:
            return [reduced.finish(t0, flows)]
        first, pair, weight, pairs, pair_route = nic
        try:
            finish = reduced.finish(t0, flows, lambda rate, alive: self.check(rate, alive, first, pair, weight))
        except Overloaded:
            rails = self.every_rail(t0, flows, first, pairs, pair_route, reduced.blocks[:1])
            reduced.solves += self.solves
            return rails
        bound = set().union(*reduced.verdicts)
        if not bound:
            return [finish]
        out = []
        for r in range(self.rails):
            if r in bound:
                nics = self.rail_finish(t0, flows, first, pairs, pair_route, r)
                reduced.solves += self.solves
                out.append(np.r_[finish[:first], nics])
            else:
                out.append(finish)
        return out

    def rail_finish(self, t0: float, flows: Flows, first: int, pairs: np.ndarray, pair_route: np.ndarray,
                    rail: int) -> np.ndarray:
        """Rail `rail`'s NIC flows timed with the fabric links they cross on it (a component of the stage's
        problem of its own: no link shared with NVLink or another rail). Identical stages (the same `flows`)
        share the problem and its solves."""
        if self._own_for is not flows:
            self._own, self._own_for = {}, flows
        if rail not in self._own:
            self._own[rail] = self._rail_problem(flows, first, pairs, pair_route, rail)
        own, nic = self._own[rail]
        out = own.finish(t0, nic)
        self.solves = own.solves
        return out

    def _rail_problem(self, flows: Flows, first: int, pairs: np.ndarray, pair_route: np.ndarray, rail: int):
        """Rail `rail`'s NIC flows and the reduced links they cross on it, fabric links included."""
        fabric = self.spines.per_rail[rail, pairs, :]
        fab_ids, fab_of = np.unique(fabric[fabric >= 0], return_inverse=True)
        capacity = np.concatenate([self.capacity, self.spines.capacity[fab_ids]])
        fab_reduced = np.full(fabric.shape, -1, dtype=np.int64)
        fab_reduced[fabric >= 0] = len(self.capacity) + fab_of.reshape(-1)
        rows = self.block(pairs)
        cross = fabric[:, 0] >= 0
        blocks, index, count = [], np.empty(len(pairs), dtype=np.int64), 0
        for sel, middle in ((~cross, fab_reduced[:, :0]), (cross, fab_reduced)):
            blocks.append(np.concatenate([rows[sel, :self.lo], middle[sel], rows[sel, self.lo:]], axis=1))
            index[sel] = count + np.arange(int(sel.sum()))
            count += int(sel.sum())
        return Reduced(capacity, blocks), Flows(index[pair_route], flows.weight[first:], flows.wire[first:])

    def every_rail(self, t0: float, flows: Flows, first: int, pairs: np.ndarray, pair_route: np.ndarray,
                   nvlink_blocks: list[np.ndarray]) -> list[np.ndarray]:
        """A stage whose rails would overload a spine link, solved with every rail's NIC flows and the fabric links
        they cross (each rail's copy of the NIC links). flows: the stage's reduced flows (the NVLink ones first,
        routes into `nvlink_blocks`; then the NIC ones, of node pairs pairs[pair_route]). Returns, per rail, every
        flow's finish time as that rail sees it (the NVLink flows' alike). Node pairs are indices into pair_ids."""
        fabric = self.spines.per_rail[:, pairs, :]
        fab_ids, fab_of = np.unique(fabric[fabric >= 0], return_inverse=True)
        per_rail = self.nn * (self.lo + self.lb)
        fab_base = len(self.capacity) + per_rail * (self.rails - 1)
        capacity = np.concatenate([self.capacity, np.tile(self.capacity[self.base:], self.rails - 1),
                                   self.spines.capacity[fab_ids]])
        fab_reduced = np.full(fabric.shape, -1, dtype=np.int64)
        fab_reduced[fabric >= 0] = fab_base + fab_of.reshape(-1)
        blocks = list(nvlink_blocks)
        count = sum(len(b) for b in blocks)
        route, weights, wires = [flows.route[:first]], [flows.weight[:first]], [flows.wire[:first]]
        rows = self.block(pairs)
        for r in range(self.rails):
            shift = 0 if r == 0 else len(self.capacity) - self.base + per_rail * (r - 1)
            cross = fabric[r, :, 0] >= 0
            index = np.empty(len(pairs), dtype=np.int64)
            for sel, middle in ((~cross, fab_reduced[r][:, :0]), (cross, fab_reduced[r])):
                blocks.append(np.concatenate([rows[sel, :self.lo] + shift, middle[sel], rows[sel, self.lo:] + shift],
                                             axis=1))
                index[sel] = count + np.arange(int(sel.sum()))
                count += int(sel.sum())
            route.append(index[pair_route])
            weights.append(flows.weight[first:])
            wires.append(flows.wire[first:])
        every = Reduced(capacity, blocks)
        finish = every.finish(t0, Flows(np.concatenate(route), np.concatenate(weights), np.concatenate(wires)))
        self.solves = every.solves
        nics = len(pair_route)
        return [np.r_[finish[:first], finish[first + r * nics:first + (r + 1) * nics]] for r in range(self.rails)]


def per_rail(rails: list[np.ndarray], cost) -> list[np.ndarray]:
    """`cost(finish)` for each rail's finish times, worked out once for rails that share one array."""
    done: dict = {}
    return [done[id(r)] if id(r) in done else done.setdefault(id(r), cost(r)) for r in rails]
