"""Runs a plan on the engine: every step's flows on the network, reductions on HBM.

Two clocks keep this both faithful and cheap. Bandwidth: a step's flows share the links together and the next
step starts when the last byte of this one is sent (lockstep, a few events per step whatever the number of ranks).
Latency: each rank carries the time its data is really ready; a flow's data arrives at its sender's ready time plus
its transfer time plus its route and protocol latency. Latency thus accumulates along each rank's chain of
dependencies, as in NCCL's pipelined rings (latency counted per hop on a chunk's path), and the collective ends
when the last rank is ready.

Steps that repeat cost once. A plan marks a step that happens k times back to back (`Step.repeat`); after the
first, the executor times the other k-1 in closed form when nothing else shares their links or their ranks'
memory ("steps" detail): the network replays them with one event (FlowNetwork.run), the memory bookings are made
lazily (DeviceQueue.hold) and the latency clocks advance on one clock per class of alike clocks (chains.py). If
something does come along, the run is cut where it stands and the remaining steps go step by step, so contention
is timed exactly as before.

Compute beside a collective slows its copies inside a node (engine/sharing.py: its CTAs share the GPU): a flow
between two GPUs of one node whose sender or receiver is computing when the step starts puts COMM_BESIDE_COMPUTE
more bytes on the wire (ComputeQueue.beside). Across nodes the CTAs wait on the NIC, far slower than they copy, and nothing changes. A
closed-form run of repeats is decided the same way when it starts, and ends where the compute it found ends.

A protocol with a rate cap (LL's llMaxBw: protocols.py) is held to it step by step: a step whose busiest sender
would push its payload faster than the cap puts proportionally more bytes on the wire (a larger wire factor for
that step), so it lasts max(its time at the protocol's efficiency, busiest sender's payload / cap). The step's
time at wire factor 1 is taken as its busiest link's load over the link's capacity, which is what the lockstep
steps of ring, tree and chains take uncontended (a per-flow rate cap would need the engine).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arrays import unique
from ..engine import NO_TAGS
from ..engine.cache import BoundedCache
from ..engine.resources import reduction_bytes
from .chains import StepMap, advance, chain_step
from .plan import Buffers, Collective, Plan, Step
from .protocols import Protocol
from .rotation import rotating
from .symmetric import has_to_itself

_AMBIGUOUS = 1e-9  # relative: a closed form must not hinge on a comparison this close
_RECENT, _RECENT_BYTES = 16, 32 << 20  # flow and chain sets an executor remembers (by identity)


@dataclass
class _Reduction:
    """A step's reductions: group ranks `who`, bytes each moves through HBM."""

    who: np.ndarray
    traffic: np.ndarray


class _Executor:
    """One collective's clocks and the per-step work."""

    def __init__(self, sim, coll: Collective, proto: Protocol, label: str, tags):
        self.sim, self.coll, self.proto, self.label, self.tags = sim, coll, proto, label, tags
        cluster = sim.cluster
        self.rpn = cluster.ranks_per_node
        self.fused = cluster.device.fused_reduction
        self.hop_intra, self.hop_net = proto.hop(cluster.intra_node[2]), proto.hop("net")
        self.ready = np.empty((1, coll.n))
        # Plans reuse the same flow arrays step after step; a plan whose stages are all new (a pipelined tree)
        # must not keep every stage's arrays alive, so only the latest few are remembered.
        self.flat_index = BoundedCache(_RECENT, _RECENT_BYTES)
        self.seen = BoundedCache(_RECENT, _RECENT_BYTES)
        self.last: Step | None = None  # the step last timed step by step, with what it cost
        self.last_cost: np.ndarray | None = None
        self.last_reduction: _Reduction | None = None
        self._wire: tuple[Step | None, float] = (None, proto.wire_factor)  # the step last given a capped factor
        self._reduced: tuple[Step | None, _Reduction | None] = (None, None)  # the step last asked for its reductions

    # ---- one step, the general way -------------------------------------------------------------------------
    def flows(self, st: Step):
        key = id(st.src)
        if key not in self.seen or self.seen[key][0] is not st.src:
            ranks = self.coll.ranks
            g_src, g_dst = ranks[st.src], ranks[st.dst]
            intra = g_src // self.rpn == g_dst // self.rpn
            self.seen.put(key, (st.src, g_src, g_dst, np.where(intra, self.hop_intra, self.hop_net), intra))
        return self.seen.get(key)[1:4]

    def beside_compute(self, st: Step):
        """(wire factor now, until when): wire(st), raised on the flows inside a node whose sender or receiver is
        computing now (module docstring), and when the first of those computations ends (None: none slowed)."""
        factor = self.wire(st)
        if not len(st.src):
            return factor, None
        g_src, g_dst, _ = self.flows(st)
        slow, until = self.sim.compute.beside(g_src, g_dst, self.seen.get(id(st.src))[4])
        return (factor if slow is None else factor * slow), until

    def wire(self, st: Step) -> float:
        """The wire factor of step st: the protocol's, raised where its rate cap binds (module docstring)."""
        cap = self.proto.max_rate
        if not np.isfinite(cap) or not len(st.src):
            return self.proto.wire_factor
        if self._wire[0] is st:
            return self._wire[1]
        cluster = self.sim.cluster
        g_src, g_dst, _ = self.flows(st)
        payload = st.nbytes if st.weight is None else st.nbytes * st.weight
        routes = st.routes if st.routes is not None else cluster.route_ids(g_src, g_dst)
        on, span = cluster.links_crossed(routes)
        load = np.bincount(on, weights=np.repeat(payload, span), minlength=cluster.num_links)
        busy = float((load[on] / cluster.link_capacity[on]).max()) if len(on) else 0.0
        busiest = float(np.bincount(st.src, weights=payload).max())
        factor = self.proto.wire_factor
        if busy > 0:
            factor = max(factor, busiest / (cap * busy))
        self._wire = (st, factor)
        return factor

    def name(self, st: Step, index: int) -> str:
        """A step's label; repeats are numbered (index of repeat, 1-based)."""
        text = f"{self.label} {st.label}".strip()
        return f"{text} {index}/{st.repeat}" if st.repeat > 1 else text

    def begin(self, st: Step, index: int = 1):
        g_src, g_dst, extra = self.flows(st)
        return self.sim.network.transfer(g_src, g_dst, st.nbytes, label=self.name(st, index),
                                         extra_latency=extra, wire_factor=self.beside_compute(st)[0],
                                         routes=st.routes, weight=st.weight, with_latency=False, tags=self.tags)

    def step(self, st: Step, index: int = 1):
        """Time one step (repeat `index` of st): its flows, then what they feed (a generator of events)."""
        t0 = self.sim.now
        tr = self.begin(st, index) if len(st.src) else None
        if tr is not None:
            yield tr.done
        yield from self.after(st, tr, t0)

    def after(self, st: Step, tr, t0: float):
        """Advance the clocks for a step that started at t0 once its transfer `tr` is done."""
        sim = self.sim
        floor = None
        self.last, self.last_cost, self.last_reduction = st, None, None
        if tr is not None:
            cost = tr.finish - t0 + sim.network.latency_of(tr)
            self.ready = _chain(self.ready, st, cost, t0, self.flat_index)
            floor = t0 + float(cost.min())  # no receiver of this step is ready before this
            self.last_cost = cost
        red = self.reduction(st)
        if red is None:
            return
        self.last_reduction = red
        ranks = self.coll.ranks
        ends = sim.memory.use(ranks[red.who], red.traffic, t0, label=f"{self.label} reduce", tags=self.tags,
                              step=True)
        ready = self.ready
        if self.fused and floor is not None and ends.max() <= floor:
            pass  # the reduction finished before any data it feeds could move on
        elif self.fused and st.chains is not None and floor is not None:
            # Only the chains this step fed wait for the reduction (their receivers, on their channels).
            hbm = np.full(self.coll.n, -np.inf)
            hbm[red.who] = ends
            _, fdst = self.flat_index[(id(st.chains), ready.shape[1])][1:]
            flat = ready.reshape(-1)
            flat[fdst] = np.maximum(flat[fdst], hbm[st.chains[2]])
        elif self.fused:
            ready[:, red.who] = np.maximum(ready[:, red.who], ends)
        else:
            ready[:, red.who] += red.traffic / sim.memory.rate
        if ends.max() > sim.now:
            yield sim.at(float(ends.max()))

    def reduction(self, st: Step) -> _Reduction | None:
        """The step's reductions (None: none); a step repeated back to back is read once, as wire() is."""
        if self._reduced[0] is not st:
            self._reduced = (st, self._reduction(st))
        return self._reduced[1]

    def _reduction(self, st: Step) -> _Reduction | None:
        who, amount = _reductions(st)
        if who is None or not len(who):
            return None
        per_rank = np.bincount(who, weights=reduction_bytes(np.broadcast_to(amount, who.shape)),
                               minlength=self.coll.n)
        uniq = np.flatnonzero(per_rank)
        if not len(uniq):  # nothing to reduce (empty chunks)
            return None
        return _Reduction(uniq, per_rank[uniq])

    # ---- a run of repeats, in closed form ------------------------------------------------------------------
    def repeats(self, st: Step, count: int):
        """Time up to `count` repeats of `st` (just timed step by step) in closed form; returns how many were
        timed (0: not possible now, time the next one step by step)."""
        sim = self.sim
        if self.last is not st or self.last_cost is None or not sim.closed_form or \
                sim.recorder.detail != "steps":
            return 0
        g_src, g_dst, extra = self.flows(st)
        net = sim.network
        wire, until = self.beside_compute(st)
        known = net.known(g_src, g_dst, st.nbytes, extra_latency=extra, wire_factor=wire,
                          routes=st.routes, weight=st.weight)
        if known is None:
            return 0
        duration, offsets, latency = known
        red = self.last_reduction
        timing = self.timing(st, duration, offsets, latency, red)
        if timing is None:
            return 0
        stall, mode, work = timing
        starts, ends = _starts(sim.now, count, duration, stall, float(work.max()) if stall else 0.0)
        if until is not None:  # the copies are slowed until that compute ends: the run stops there
            keep = max(1, int(np.searchsorted(starts, until)))
            starts, ends = starts[:keep], (ends[:keep] if stall else ends)
        smap = self.step_map(st, offsets, latency, mode, red, work)
        if smap is None:
            return 0
        run = net.run(g_src, g_dst, st.nbytes, starts, label=self.name(st, st.repeat - count + 1),
                      extra_latency=extra, wire_factor=wire, routes=st.routes,
                      weight=st.weight, tags=self.tags)
        if run is None:
            return 0
        hold = None
        if red is not None:
            def conflict():
                net.cut(run)
                return run.completed
            hold = sim.memory.hold(self.coll.ranks[red.who], red.traffic, starts, conflict,
                                   label=f"{self.label} reduce", tags=self.tags, ends=ends)
        yield run.done
        done = run.completed
        if hold is not None:
            hold.settle(done)
        shape = self.ready.shape
        self.ready = advance(self.ready.reshape(-1), smap, starts[:done]).reshape(shape)
        if run.inflight is not None:
            tr = run.inflight
            yield tr.done
            yield from self.after(st, tr, tr.start)
            return done + 1
        if stall and done:
            yield sim.at(float(ends[done - 1]))
        return done

    def timing(self, st: Step, duration: float, offsets, latency, red: _Reduction | None):
        """How repeats of st go when their ranks' memory is free at the first one's start: (stall, mode, work)
        where stall says the reductions end after the last byte (so the next repeat waits for them), mode what
        they do to the clocks and work each reducing rank's reduction time. None when the memory is busy, or a
        decision the step-by-step path makes each step is too close to call (float rounding could flip it)."""
        if red is None:
            return False, None, None
        sim = self.sim
        if (sim.memory.free_at[self.coll.ranks[red.who]] > sim.now).any():
            return None
        work = red.traffic / sim.memory.rate
        longest = float(work.max())
        cmin = float((offsets + latency).min())

        def close(a, b):
            return abs(a - b) <= _AMBIGUOUS * max(abs(a), abs(b), 1e-30)
        if close(longest, duration) or (self.fused and close(longest, cmin)):
            return None
        stall = longest > duration
        if stall and (work != longest).any():
            return None  # uneven reductions that hold up the next step: the queue's rounding is not tracked
        if not self.fused:
            mode = "add"
        elif longest < cmin:
            mode = None  # done before anything it feeds moves on
        else:
            mode = "chains" if st.chains is not None else "ranks"
        return stall, mode, work

    def step_map(self, st: Step, offsets, latency, mode, red: _Reduction | None, work) -> StepMap | None:
        """The step's effect on the flattened clocks (chains.StepMap), or None where it is not one such map."""
        c, n = self.ready.shape
        size = c * n
        pred = np.full(size, -1, dtype=np.int64)
        off = np.full(size, -np.inf)
        lat = np.zeros(size)
        if st.chains is None:
            if c != 1 or len(unique(st.dst)) != len(st.dst):
                return None  # a receiver with several senders (max over them): step by step
            pred[st.dst], off[st.dst], lat[st.dst] = st.src, offsets, latency
        else:
            _, fsrc, fdst = self.flat_index[(id(st.chains), n)]
            flow = st.chains[3]
            # Of several same-step arrivals at one clock the executor keeps the last (see tree.py): so does this.
            _, last = np.unique(fdst[::-1], return_index=True)
            last = len(fdst) - 1 - last
            y, f = fdst[last], flow[last]
            pred[y], off[y], lat[y] = fsrc[last], offsets[f], latency[f]
        smap = StepMap(pred, off, lat)
        if mode is None:
            return smap
        per_rank = np.full(n, 0.0 if mode == "add" else -np.inf)
        per_rank[red.who] = work
        if mode == "add":
            smap.add = np.tile(per_rank, c)
        elif mode == "ranks":
            smap.hbm = np.tile(per_rank, c)
        else:  # "chains": the clocks this step fed, on their channels
            smap.hbm = np.full(size, -np.inf)
            fdst = self.flat_index[(id(st.chains), n)][2]
            smap.hbm[fdst] = per_rank[st.chains[2]]
        return smap


def execute(sim, coll: Collective, plan: Plan, buffers: Buffers, proto: Protocol, label: str, tags=NO_TAGS,
            alone=None):
    """A simpy process body: run `plan` for `coll` on `sim`; returns the finish time. The collective is recorded
    on each of its ranks with `tags`; its flows carry them too. `alone(sim, coll, proto, label, tags)`, the
    plan's closed form when it has the simulation to itself (symmetric.py), is tried first for size-only data."""
    ex = _Executor(sim, coll, proto, label, tags)
    start = sim.now
    if proto.base_latency > 0:
        yield sim.env.timeout(proto.base_latency)  # launch and setup, before any byte moves
    end = alone(sim, coll, proto, label, tags) if alone is not None and not buffers.live and \
        has_to_itself(sim) else None
    if end is not None:
        if end > sim.now:
            yield sim.at(end)
        sim.recorder.spans("collective", coll.ranks, start, sim.now, coll.nbytes, label, tags)
        return sim.now
    ex.ready = np.full((1, coll.n), float(sim.now))  # per (channel, group rank)
    for st in plan(coll, buffers):
        if st.rotate and st.repeat > 1:
            yield from rotating(ex, st)
            continue
        left = max(int(st.repeat), 1)
        while left:
            done = (yield from ex.repeats(st, left)) if left > 1 and ex.last is st else 0
            if not done:
                yield from ex.step(st, st.repeat - left + 1)
                done = 1
            left -= done
    end = max(float(ex.ready.max()), sim.now)
    if end > sim.now:
        yield sim.at(end)
    sim.recorder.spans("collective", coll.ranks, start, sim.now, coll.nbytes, label, tags)
    return sim.now


def _starts(now: float, count: int, duration: float, stall: bool, work: float = 0.0):
    """Start times of `count` back-to-back repeats and when each one's reductions end (if they hold up the next
    repeat, by `work` each), with the float arithmetic of timing them one by one."""
    starts = np.empty(count)
    ends = np.empty(count) if stall else None
    t, free = now, -np.inf
    for j in range(count):
        starts[j] = t
        end = t + duration
        if stall:
            free = max(free, t) + work
            ends[j] = free
            t = end + (free - end)
        else:
            t = end
    return starts, ends


def _chain(ready: np.ndarray, st, cost: np.ndarray, t0: float, flat_index) -> np.ndarray:
    """Advance the latency clock: each flow's data is ready at the receiver when its sender was ready (or the
    step began) plus the flow's cost (transfer time plus latency); with the step's chains, per (channel, rank)
    (chains.chain_step)."""
    if st.chains is None:
        arrival = np.maximum(ready[:, st.src].max(axis=0), t0) + cost
        latest = _max_by(st.dst, arrival, ready.shape[1])
        np.maximum(ready, latest, out=ready)
        return ready
    return chain_step(ready, st.chains, cost, t0, flat_index)


def _max_by(keys: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """out[k] = max of values with that key (-inf where none); a sort instead of the slow ufunc.at."""
    out = np.full(size, -np.inf)
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    last = np.r_[k[1:] != k[:-1], True]
    if last.all():
        out[k] = v
    else:
        starts = np.r_[0, np.flatnonzero(last[:-1]) + 1]
        out[k[last]] = np.maximum.reduceat(v, starts)
    return out


def _reductions(st):
    """(group ranks that reduce this step, bytes each reduces) or (None, None)."""
    who, amount = None, None
    if st.reduce and len(st.src):
        who, amount = st.dst, (st.nbytes if st.weight is None else st.nbytes * st.weight)
    if st.local_reduce is not None:
        lr, lb = st.local_reduce
        who = lr if who is None else np.concatenate([who, lr])
        amount = lb if amount is None else np.concatenate([amount, lb])
    return who, amount
