"""A rotating step (Step.rotate): repeats whose flow sizes move one flow on each time, as gloo's ring moves its
uneven chunks one rank per stage.

Step by step each repeat is a step of its own on the engine: n-1 stages of n flows, O(n^2) for a ring. When the
collective has the simulation to itself, its flows share no link and every route is alike (the same bottleneck
rate and latency: one host's loopback, a star), a flow's timing depends only on its size and when its stage
starts. Each stage is then timed on one flow per distinct size with the engine's own rules for a batch alone on its
links (symmetric.Reduced.finish), and the executor's latency clocks and reductions are advanced with its own
arithmetic (executor._Executor.after), so the times are the step-by-step path's, bit for bit (tests compare them).
On a ring the clocks are kept as runs of equal clocks (ring_runs.py): a stage then costs O(distinct sizes + runs),
and a one-float all_reduce on N ranks O(N) in all. The engine learns nothing from these stages (step by step it
kept each stage's trajectory to replay an identical batch later); a replay and a live batch give the same cost to
the last bit whenever the later start's ulp is no finer than the earlier one's, as it is for any later stage.
"""
from __future__ import annotations

import numpy as np

from ..engine.exact import delay_to
from ..engine.maxmin import max_min_rates_csr
from ..engine.resources import reduction_bytes
from .plan import Step
from .ring_runs import RingRuns, last_stage
from .symmetric import Bookings, Flows, Reduced, has_to_itself

_MOST_RUNS, _RUNS_PER_RANK = 64, 8  # runs of equal clocks (or one per 8 ranks) beyond which a stage is cheaper
# rank by rank


def rotating(ex, st: Step):
    """Time the st.repeat repeats of rotating step st on executor ex (a generator of events)."""
    done = 0
    stage = _Stages.of(ex, st)
    if stage is not None:
        done = yield from stage.run()
    for j in range(done, st.repeat):
        yield from ex.step(st.rotated(j), j + 1)


class _Stages:
    """A rotating step's stages in closed form: k distinct sizes, one flow of each timed per stage."""

    def __init__(self, ex, st: Step, rates: np.ndarray, latency: np.ndarray, group: np.ndarray, wire_factor: float):
        self.ex, self.st = ex, st
        self.latency = latency  # of each route group (alike routes: the same rate and latency)
        self.group = group  # of each flow
        self.sizes, self.kind = np.unique(st.nbytes, return_inverse=True)  # a flow's size class at repeat 0
        k = len(self.sizes)
        self.count = np.bincount(self.kind, minlength=k)
        self.major = int(np.argmax(np.bincount(group)))
        self.minor = np.flatnonzero(group != self.major)  # the few flows on other routes (across hosts)
        # One link of its own per (route group, size class): a stage times one flow of each it has.
        self.reduced = Reduced(np.repeat(rates, k), [np.arange(len(rates) * k)[:, None]])
        self.wire = np.tile(self.sizes * wire_factor, len(rates))
        self._flows: dict = {}
        self.reduces = reduction_bytes(self.sizes) if st.reduce else None
        self.solves = 0
        n = len(st.src)
        self._amounts = self._who = None  # a stage's reductions, one per reducing rank (integral: any order)
        if self.reduces is not None and (self.reduces > 0).any():
            self._amounts = self.reduces[self.kind][self.reduces[self.kind] > 0]
            self._who = np.zeros(len(self._amounts), np.int64)  # "steps" rows count the ranks, not which
        self.ring = bool((st.src == np.arange(n)).all() and (st.dst == (st.src - 1) % n).all())

    @classmethod
    def of(cls, ex, st: Step) -> "_Stages | None":
        """The closed form of st on ex, or None where it does not apply (the stages then go step by step)."""
        sim = ex.sim
        if not has_to_itself(sim) or st.routes is not None or st.weight is not None or st.chains is not None or \
                st.local_reduce is not None or ex.ready.shape[0] != 1:
            return None
        if len(np.unique(st.dst)) != len(st.dst) or not len(st.src):
            return None
        wire, until = ex.beside_compute(st)
        if until is not None:
            return None
        cluster = sim.cluster
        g_src, g_dst, extra = ex.flows(st)
        routes = cluster.route_ids(g_src, g_dst)
        on, _ = cluster.links_crossed(routes)
        if len(on) and np.bincount(on).max() > 1:
            return None  # flows that share a link: their rates depend on which others are still sending
        latency = cluster.route_latency[routes] + extra  # FlowNetwork.latency_of
        lengths, starts, links = cluster.route_csr()
        rates = max_min_rates_csr(lengths[routes], starts[routes], links, np.ones(len(routes)),
                                  cluster.link_capacity)
        if not np.isfinite(rates).all():
            return None
        alike, group = np.unique(np.stack([rates, latency], axis=1), axis=0, return_inverse=True)
        group = group.reshape(-1)
        if len(alike) > 1 and (not np.isinf(ex.proto.max_rate) or
                               len(group) - np.bincount(group).max() > max(_MOST_RUNS, len(group) // 64)):
            return None  # a rate cap (its wire factor would differ by rotation) or too many routes apart
        # A protocol's rate cap raises the wire factor by the busiest sender's payload over its route's narrowest
        # link (executor.wire): with one flow per link and every route that narrow, the same for every rotation.
        return cls(ex, st, alike[:, 0], alike[:, 1], group, wire)

    def run(self):
        """Time every stage; returns how many (all of them)."""
        ex, st = self.ex, self.st
        sim = ex.sim
        book = Bookings(sim.memory, ex.coll.ranks) if self.reduces is not None else None
        ready = ex.ready[0]
        t = sim.now
        j = 0
        if self.ring and (book is None or (book.free <= t).all()):
            t, j = self._as_runs(t, ready, book)
        for j in range(j, st.repeat):
            t = self._stage(t, j, ready, book)
        ex.last = ex.last_cost = ex.last_reduction = None
        if book is not None:
            book.commit(f"{ex.label} reduce", ex.tags)
        net = sim.network.stats
        net["transfers"] += st.repeat
        net["flows"] += st.repeat * len(st.src)
        net["closed_form"] += st.repeat
        net["solves"] += self.solves
        yield sim.env.timeout(delay_to(sim.env.now, t))
        return st.repeat

    def _timing(self, t0: float, j: int) -> tuple[np.ndarray, float]:
        """Stage j from t0: the cost (transfer and latency: executor.after) of a flow of each route group and size
        class (NaN where the stage has none) and when its last byte is sent, which is when the executor's next
        step starts."""
        k = len(self.sizes)
        key = None  # every route alike: every stage has one flow of each size
        if len(self.minor):
            mine = self.group[self.minor] * k + self.kind[(self.minor + j) % len(self.kind)]
            left = self.count - np.bincount(mine % k, minlength=k)
            key = np.union1d(mine, self.major * k + np.flatnonzero(left)).tobytes()
        flows = self._flows.get(key)
        if flows is None:
            ids = np.frombuffer(key, np.int64) if key is not None else self.major * k + np.arange(k)
            flows = self._flows[key] = Flows(ids, np.ones(len(ids)), self.wire[ids])
        ids = flows.route
        finish = self.reduced.finish(t0, flows)
        self.solves += self.reduced.solves
        cost = np.full(len(self.wire), np.nan)
        cost[ids] = (finish - t0) + self.latency[ids // k]
        return cost.reshape(len(self.latency), k), float(finish.max())

    def _as_runs(self, t: float, ready: np.ndarray, book) -> tuple[float, int]:
        """The stages on runs of equal clocks (ring_runs.py) while the ranks' memory is free at each stage's
        start and the runs stay few; returns when the next stage starts and how many were timed. The clocks and
        memory bookings are left as the step-by-step path leaves them."""
        st, n = self.st, len(self.kind)
        runs = RingRuns(ready.copy(), self.kind)
        starts, j, stalled = [], 0, False
        while j < st.repeat and not stalled and len(runs) <= max(_MOST_RUNS, n // _RUNS_PER_RANK):
            starts.append(t)
            t, stalled = self._runs_stage(t, j, runs, book)
            j += 1
        ready[:] = runs.clocks(j)
        if book is not None:
            held = np.flatnonzero(self.reduces[self.kind] > 0)
            last = last_stage(held, n, j)
            p = np.flatnonzero(last >= 0)
            kind = self.kind[(p + 1 + last[p]) % n]
            book.free[p] = np.asarray(starts)[last[p]] + self.reduces[kind] / book.queue.rate
        return t, j

    def _runs_stage(self, t0: float, j: int, runs: RingRuns, book) -> tuple[float, bool]:
        """_stage on runs; with it, whether some rank's memory is still busy when the next stage starts (then
        each rank's memory matters: the rest go rank by rank)."""
        table, now = self._timing(t0, j)
        cost = table[self.major]
        where = (self.minor + j) % len(self.kind)
        order = np.argsort(where)
        special = (where[order], table[self.group[self.minor], self.kind[where]][order])
        if book is None or self._amounts is None:
            runs.step(t0, cost, None, None, special)
            return now, False
        nz, rate = self.reduces > 0, book.queue.rate
        ends = t0 + self.reduces / rate  # every rank's memory is free by t0: DeviceQueue.use's end
        top = float(ends[nz].max())
        fused = self.ex.fused
        hbm = np.where(nz, ends, -np.inf) if fused and top > t0 + float(np.nanmin(table)) else None
        runs.step(t0, cost, None if fused else np.where(nz, self.reduces / rate, 0.0), hbm, special)
        book.rows.append((self._who, t0, top, self._amounts))  # a "steps" row, as Bookings.commit records it
        after = now + max(top - now, 0.0) if top > now else now  # executor.after's sim.at(top)
        return after, after < top  # an ulp short of the reductions' end: the memory of each rank matters

    def _stage(self, t0: float, j: int, ready: np.ndarray, book) -> float:
        """Stage j from t0 (the executor's step and after), rank by rank; when the next starts."""
        st, ex = self.st, self.ex
        kind = np.roll(self.kind, -j)
        table, now = self._timing(t0, j)
        cost = table[self.group, kind]
        arrival = np.maximum(ready[st.src], t0) + cost
        ready[st.dst] = np.maximum(ready[st.dst], arrival)
        if book is None:
            return now
        per_rank = np.zeros(len(ready))
        per_rank[st.dst] = self.reduces[kind]
        who = np.flatnonzero(per_rank)
        if not len(who):
            return now
        traffic = per_rank[who]
        ends = book.use(who, traffic, t0)
        floor = t0 + float(cost.min())
        top = float(ends.max())
        if ex.fused and top > floor:
            ready[who] = np.maximum(ready[who], ends)
        elif not ex.fused:
            ready[who] += traffic / ex.sim.memory.rate
        return now + max(top - now, 0.0) if top > now else now

