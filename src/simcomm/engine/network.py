"""Flow-level network: a transfer is a batch of flows; bandwidth is shared max-min fairly on every link.

Events: one re-solve per instant at which flows start (however many start then), one timer per instant at which
flows finish, and one delivery event per batch. A flow takes its route's bandwidth share until its bytes are sent,
then arrives after the route's latency, so an uncontended flow takes exactly latency + bytes / bottleneck.

Closed forms (engine/replay.py): a batch that shares no link with any active flow replays the trajectory it
recorded the last time it ran alone on its links (one event, no solve), even while unrelated traffic runs on other
links; `run` replays k identical batches back to back with one event. Whatever later wants one of their links
turns the step in flight back into live flows, which are solved with the newcomer. While link loads are recorded
("flows" detail, for reports) a batch replays only on an idle network and runs are not used, so the loads are
written in time order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import simpy

from ..arrays import filled, unique

from .cache import BoundedCache
from .exact import delay_to
from .ids import distinct, factorize
from .maxmin import max_min_rates_csr
from .replay import Learning, Replay, Run, StepTemplate, Trajectory
from .trace import NO_TAGS

_MEMOS = 256  # the flow arrays (and solo keys) remembered by identity, then forgotten all at once
_REMEMBERED_ROUTES = 1024  # flows up to which _route_links remembers what their routes cross
_LIVE_INTS = ("_route", "_bid", "_index")  # the rows of Network._ints
_LIVE_FLOATS = ("_remaining", "_rate", "_extra", "_weight")  # ... and of Network._floats


@dataclass(eq=False)
class Transfer:
    """A batch of flows started together. `done` fires when every flow has arrived."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    route: np.ndarray
    start: float
    done: simpy.Event
    label: str = ""
    extra_latency: np.ndarray = None
    finish: np.ndarray = field(default=None)  # per-flow arrival time, filled as flows arrive
    pattern: bytes | None = None
    _pending: int = 0
    _last_arrival: float = 0.0
    weight: np.ndarray = None  # identical flows each entry stands for
    with_latency: bool = True
    tags: Mapping = field(default_factory=lambda: NO_TAGS)


@dataclass(eq=False)
class _Memo:
    """A transfer's flow arrays by identity, with their routes: plans and schedules repeat a step's arrays."""

    src: np.ndarray
    dst: np.ndarray
    weight: object
    routes: object
    pattern: bytes
    route: np.ndarray
    w: np.ndarray


class FlowNetwork:
    """The links of a cluster and the flows crossing them."""

    def __init__(self, env: simpy.Environment, cluster, recorder=None):
        self.env = env
        self.cluster = cluster
        self.recorder = recorder
        # Where the rates each solve (or replayed segment) assigns go, summed per link; None: not recorded.
        self.link_loads = getattr(recorder, "link_loads", None)
        self.capacity = cluster.link_capacity
        # Live flows, in start order (a batch's flows stay contiguous and ordered), one per column of two arrays
        # (flows come and go: two numpy operations, not one per field); the fields are views of their rows:
        # _route, _bid (batch id of each flow), _index (position of each flow inside its batch); _remaining (wire
        # bytes left), _rate, _extra (latency added on arrival), _weight.
        self._ints = np.empty((len(_LIVE_INTS), 0), dtype=np.int64)
        self._floats = np.empty((len(_LIVE_FLOATS), 0))
        self._set_live(self._ints, self._floats)
        self._batches: dict[int, Transfer] = {}
        self._next_bid = 0
        self._updated = 0.0
        self._generation = 0  # of the live flow set: a pending finish timer is stale once it moves on
        self._resolve_pending = False
        self._routes_cache = BoundedCache()  # pattern -> route ids
        self._links_cache = BoundedCache()  # pattern -> links crossed
        self._route_links_cache = BoundedCache()  # route ids (bytes) -> the links they cross, with repeats
        self._memos: dict[tuple, _Memo] = {}  # (ids of src, dst, weight, routes) -> the last transfer of those
        self._rates_cache = BoundedCache()  # live batches -> max-min rates
        self._live_count = np.zeros(cluster.num_links, dtype=np.int64)  # live flows crossing each link
        # Closed forms (engine/replay.py): trajectories by pattern, replays holding links, batches being learned.
        self._solo_cache = BoundedCache(max_entries=1024)  # pattern and bytes -> Trajectory
        self._replays: dict[int, Replay] = {}
        self._next_rid = 0
        # Per-link ids are kept as id + 1 in zeroed arrays (0: none), whose pages the kernel maps only where a link
        # is marked: a session that never replays or learns on most of 1.5 million links never writes them.
        self._owner = np.zeros(cluster.num_links, dtype=np.int64)  # replay holding each link + 1 (see _owners)
        self._owner_stale = False
        self._owned = np.empty(0, dtype=np.int64)  # the links _owner marks
        self._key_memos: dict[tuple, tuple] = {}  # (id of a pattern, uniform wire) -> (pattern, its solo key)
        self._learning: dict[int, Learning] = {}  # batch id -> its recording
        self._learner = np.zeros(cluster.num_links, dtype=np.int64)  # learning batch on each link + 1
        self.stats = {"transfers": 0, "flows": 0, "solves": 0, "solve_cache_hits": 0, "closed_form": 0}

    # ---- public ------------------------------------------------------------------------------------------
    def transfer(self, src, dst, nbytes, label: str = "", extra_latency=0.0, wire_factor: float = 1.0,
                 routes=None, weight=None, with_latency: bool = True, tags: Mapping = NO_TAGS) -> Transfer:
        """Start flows src[i] -> dst[i] of nbytes[i] bytes now.

        `extra_latency` (scalar or per flow) is added to each flow's arrival (a protocol's software overhead);
        `wire_factor` scales the bytes put on the wire (a protocol that sends flags with the data) without changing
        the payload that is reported. `routes` gives explicit route ids (see Cluster.path_route) instead of the
        rank-to-rank routes. `weight[i]` > 1 makes flow i stand for that many identical flows (same route, size
        and start): max-min treats them as separate flows, the engine tracks them as one. With
        `with_latency=False` flows complete when their last byte is sent; the caller accounts for latency (see
        `latency_of`), as the collective executor does to pipeline latency along dependency chains.
        """
        src, dst, payload, pattern, route, w, extra = self._prepare(src, dst, nbytes, routes, weight, extra_latency)
        t = Transfer(src, dst, payload, route, self.env.now, self.env.event(), label, extra,
                     np.full(len(src), np.nan), pattern, len(src), self.env.now, w, with_latency, tags)
        self.stats["transfers"] += 1
        self.stats["flows"] += int(w.sum())
        if len(src) == 0:
            t.done.succeed(t)
            return t
        wire = payload * wire_factor
        key = self._solo_key(pattern, wire)
        links = self._links_of(pattern, route)
        if self.link_loads is not None:  # loads are recorded in time order: replay on an idle network only
            alone = not len(self._route) and not self._replays and not self._resolve_pending
            self._claim(None)
        else:
            self._claim(links)
            alone = not self._live_overlaps(links)
        if alone and key in self._solo_cache:
            self._replay(t, self._solo_cache.get(key), wire, links)
            return t
        self._add_live(t, wire, learn=(key, links) if alone else None)
        return t

    def run(self, src, dst, nbytes, starts, label: str = "", extra_latency=0.0, wire_factor: float = 1.0,
            routes=None, weight=None, tags: Mapping = NO_TAGS) -> Run | None:
        """Replay len(starts) identical transfers (as `transfer(..., with_latency=False)`), step j starting at
        starts[j] (starts[0] is now, each after the previous one's last byte), in closed form: one event.

        Returns None when that is not possible now: the batch's trajectory is unknown (it never ran alone on its
        links), or another active flow shares one of its links. See `Run` for what a cut run reports.
        """
        src, dst, payload, pattern, route, w, extra = self._prepare(src, dst, nbytes, routes, weight, extra_latency)
        wire = payload * wire_factor
        trajectory = self._solo_cache.get(self._solo_key(pattern, wire))
        if trajectory is None or not len(src) or self.link_loads is not None:
            return None
        links = self._links_of(pattern, route)
        if self._held(links) or self._live_overlaps(links):
            return None
        starts = np.asarray(starts, dtype=np.float64)
        run = Run(starts, self.env.event(), trajectory.offsets, self._latency_table()[route] + extra,
                  StepTemplate(src, dst, payload, route, label, extra, pattern, w, tags), wire)
        rep = self._hold(Replay(self._next_rid, None, float(starts[0]), trajectory, wire, links, run))
        self._timer_at(rep, float(starts[-1]) + trajectory.duration)
        return run

    def known(self, src, dst, nbytes, extra_latency=0.0, wire_factor: float = 1.0, routes=None,
              weight=None) -> tuple[float, np.ndarray, np.ndarray] | None:
        """(duration, per-flow offset of the last byte, per-flow latency) of this batch if it would replay now
        (its trajectory is known and no active flow shares its links), else None."""
        src, dst, payload, pattern, route, w, extra = self._prepare(src, dst, nbytes, routes, weight, extra_latency)
        trajectory = self._solo_cache.get(self._solo_key(pattern, payload * wire_factor))
        if trajectory is None or not len(src):
            return None
        links = self._links_of(pattern, route)
        if self._held(links) or self._live_overlaps(links):
            return None
        return trajectory.duration, trajectory.offsets, self._latency_table()[route] + extra

    def cut(self, run: Run) -> None:
        """End `run` now without disturbing its step in flight, which goes on as a transfer of its own (a
        caller that must change what happens after the step, such as its ranks' memory being used, cuts it)."""
        rep = next((r for r in self._replays.values() if r.run is run), None)
        if rep is not None:
            self._cut(rep, live=False)

    def latency_of(self, t: Transfer) -> np.ndarray:
        """Per-flow latency of a transfer: its route's links plus its extra latency."""
        return self._latency_table()[t.route] + t.extra_latency

    @property
    def active_flows(self) -> int:
        return len(self._route) + sum(len(r.wire) for r in self._replays.values())

    # ---- preparing a batch -------------------------------------------------------------------------------
    def _prepare(self, src, dst, nbytes, routes, weight, extra_latency):
        if not (type(src) is np.ndarray and src.dtype == np.int64 and src.ndim == 1):  # else as schedules pass them
            src = np.atleast_1d(np.asarray(src, dtype=np.int64))
        if not (type(dst) is np.ndarray and dst.dtype == np.int64 and dst.ndim == 1):
            dst = np.atleast_1d(np.asarray(dst, dtype=np.int64))
        payload = np.full(src.shape, float(nbytes)) if type(nbytes) is float or np.ndim(nbytes) == 0 else \
            filled(nbytes, src.shape)
        ids = (id(src), id(dst), id(weight), id(routes))
        memo = self._memos.get(ids)
        if memo is not None and memo.src is src and memo.dst is dst and memo.weight is weight and \
                memo.routes is routes:
            pattern, route, w = memo.pattern, memo.route, memo.w  # the same arrays again: skip re-keying
        else:
            w = np.ones(len(src)) if weight is None else filled(weight, src.shape)
            if routes is not None:
                route = np.asarray(routes, dtype=np.int64)
                pattern = b"R" + route.tobytes() + w.tobytes()
            else:
                pattern = src.tobytes() + b"|" + dst.tobytes() + w.tobytes()
                route = self._routes_cache.get(pattern)
                if route is None:
                    route = self._routes_cache.put(pattern, self.cluster.route_ids(src, dst))
            if len(self._memos) >= _MEMOS:
                self._memos.clear()
            self._memos[ids] = _Memo(src, dst, weight, routes, pattern, route, w)  # holds them: ids stay theirs
        extra = np.full(src.shape, float(extra_latency)) if type(extra_latency) is float else \
            filled(extra_latency, src.shape)
        return src, dst, payload, pattern, route, w, extra

    def _solo_key(self, pattern: bytes, wire: np.ndarray) -> bytes:
        uniform = len(wire) and wire[0] == wire[-1] and (wire == wire[0]).all()
        if not uniform:
            return pattern + b"#" + wire.tobytes()
        ids = (id(pattern), float(wire[0]))
        memo = self._key_memos.get(ids)  # the same key object again: its hash is computed once, not per step
        if memo is not None and memo[0] is pattern:
            return memo[1]
        key = pattern + b"#" + wire[:1].tobytes()
        if len(self._key_memos) >= _MEMOS:
            self._key_memos.clear()
        self._key_memos[ids] = (pattern, key)
        return key

    def _latency_table(self) -> np.ndarray:
        return self.cluster.route_latency

    def _route_links(self, routes: np.ndarray) -> np.ndarray:
        """Every link id the given route ids cross (with repeats). Remembered for a few flows: the flows of a
        step's sends start and end together again and again (a route's links never change)."""
        if len(routes) > _REMEMBERED_ROUTES:
            return self.cluster.links_crossed(routes)[0]
        key = routes.tobytes()
        on = self._route_links_cache.get(key)
        if on is None:
            on = self._route_links_cache.put(key, self.cluster.links_crossed(routes)[0])
        return on

    def _links_of(self, pattern: bytes, route: np.ndarray) -> np.ndarray:
        links = self._links_cache.get(pattern)
        if links is None:
            links = self._links_cache.put(pattern, self._links_crossed(route))
        return links

    def _links_crossed(self, route: np.ndarray) -> np.ndarray:
        """The distinct links the given routes cross, ascending."""
        return distinct(self._route_links(distinct(route, len(self.cluster.route_links))), self.cluster.num_links)

    def _live_overlaps(self, links: np.ndarray) -> bool:
        return bool(len(self._route)) and bool((self._live_count[links] > 0).any())

    def _count_live(self, routes: np.ndarray, sign: int) -> None:
        """Flows on `routes` become live (sign 1) or stop being live (-1): the per-link counts follow, at the cost
        of the links those flows cross (a 131,072-GPU cluster has 1.5 million links)."""
        self._count_links(self._route_links(routes), sign)

    def _count_links(self, on: np.ndarray, sign: int) -> None:
        """_count_live for the links those flows cross (`on`, with repeats)."""
        if 8 * len(on) > len(self._live_count):
            self._live_count += sign * np.bincount(on, minlength=len(self._live_count))
        elif len(on):
            np.add.at(self._live_count, on, sign)

    def _claim(self, links: np.ndarray | None) -> None:
        """A batch on `links` (None: anywhere) is starting: replays on them become live flows, batches learning
        on them stop."""
        if links is None:
            for rep in list(self._replays.values()):
                self._cut(rep, live=True)
            for bid in list(self._learning):
                self._forget(bid)
            return
        owners = self._owners()[links] if self._replays else links[:0]
        if owners.any():
            for rid in (unique(owners[owners > 0]) - 1).tolist():
                self._cut(self._replays[rid], live=True)
        if self._learning:
            learners = self._learner[links]
            if learners.any():
                for bid in (unique(learners[learners > 0]) - 1).tolist():
                    self._forget(bid)

    # ---- live flows ----------------------------------------------------------------------------------------
    def _add_live(self, t: Transfer, wire: np.ndarray, learn=None, rates=None, index=None) -> None:
        """Make t's flows (those in `index`, all by default) live with `wire` bytes left to send."""
        self._advance()
        bid = self._next_bid
        self._next_bid += 1
        self._batches[bid] = t
        n = len(wire)
        if learn is not None:
            key, links = learn
            self._learning[bid] = Learning(t, key, self.env.now, links, bw_done=np.full(n, np.nan))
            self._learner[links] = bid + 1
        ints, floats = np.empty((len(_LIVE_INTS), n), dtype=np.int64), np.empty((len(_LIVE_FLOATS), n))
        ints[0] = t.route if index is None else t.route[index]
        ints[1] = bid
        ints[2] = np.arange(n) if index is None else index
        floats[0] = wire
        floats[1] = 0.0 if rates is None else rates
        floats[2] = t.extra_latency if index is None else t.extra_latency[index]
        floats[3] = t.weight if index is None else t.weight[index]
        self._generation += 1  # any pending finish timer was computed for the old flow set
        self._count_live(ints[0], 1)
        if len(self._route):
            ints = np.concatenate([self._ints, ints], axis=1)
            floats = np.concatenate([self._floats, floats], axis=1)
        self._set_live(ints, floats)  # else the common lockstep case: nothing else in flight
        if not self._resolve_pending:
            self._resolve_pending = True
            ev = self.env.timeout(0)
            ev.callbacks.append(self._on_resolve)

    def _set_live(self, ints: np.ndarray, floats: np.ndarray) -> None:
        self._ints, self._floats = ints, floats
        self._route, self._bid, self._index = ints
        self._remaining, self._rate, self._extra, self._weight = floats

    def _advance(self) -> None:
        """Charge the bytes sent since the last update at the current rates."""
        dt = self.env.now - self._updated
        if dt > 0 and len(self._remaining):
            self._remaining -= self._rate * dt
        self._updated = self.env.now

    def _on_resolve(self, _event) -> None:
        self._resolve_pending = False
        self._advance()
        self._solve()
        self._note_loads()
        self._schedule_next()

    def _solve(self, unchanged: bool = False) -> None:
        """Max-min rates for the live flows (`unchanged`: they are known to be the current ones)."""
        if not len(self._route):
            return
        # Batch ids are ascending in the live arrays, so one batch means equal ends.
        bids = [int(self._bid[0])] if self._bid[0] == self._bid[-1] else unique(self._bid).tolist()
        if unchanged:
            if self._learning:
                self._record_rates(len(bids) == 1)
            return
        self.stats["solves"] += 1
        batches = [self._batches[b] for b in bids]
        # Rates depend only on which flows are live: the batches' patterns, and which of their flows remain.
        full = all(b._pending == len(b.src) for b in batches)
        key = tuple(b.pattern for b in batches) + (None if full else self._index.tobytes(),)
        cached = self._rates_cache.get(key)
        if cached is not None:
            self.stats["solve_cache_hits"] += 1
        else:
            classes, inverse = factorize(self._route, len(self.cluster.route_links))
            counts = np.bincount(inverse, weights=self._weight)
            lengths, starts, links = self.cluster.route_csr()
            cached = max_min_rates_csr(lengths[classes], starts[classes], links, counts, self.capacity)[inverse]
            self._rates_cache.put(key, cached)
        self._rate[:] = cached  # a copy: the cache keeps its own
        if self._learning:
            self._record_rates(len(bids) == 1)

    def _record_rates(self, single: bool) -> None:
        for bid, rec in self._learning.items():
            sel = slice(None) if single else self._bid == bid
            full = np.zeros(len(rec.transfer.src))
            full[self._index[sel]] = self._rate[sel]
            rec.seg_starts.append(self.env.now - rec.start)
            rec.seg_rates.append(full)

    def _schedule_next(self) -> None:
        self._generation += 1
        if not len(self._route):
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            ttf = self._remaining / self._rate
        ttf[self._rate == np.inf] = 0.0
        self._ttf, self._ttf_at = ttf, self.env.now
        dt = max(float(ttf.min()), 0.0)
        ev = self.env.timeout(dt, value=self._generation)
        ev.callbacks.append(self._on_timer)

    def _on_timer(self, event) -> None:
        if event.value != self._generation:
            return  # superseded by a later re-solve
        self._advance()
        # Flows within a relative hair of finishing finish now: float error must not cost an extra event.
        elapsed = self.env.now - self._ttf_at
        done = self._ttf <= elapsed + 1e-12 * max(self.env.now, 1e-9) + 1e-18
        freed = self._route[done]
        self._finish(done)
        keep = ~done
        if keep.any():
            self._set_live(self._ints[:, keep], self._floats[:, keep])
        else:
            self._set_live(self._ints[:, :0], self._floats[:, :0])
        on = self._route_links(freed)
        self._count_links(on, -1)
        # Max-min rates decompose over flows that share no link: if none of the live flows crossed a link of the
        # ones that ended, their rates stay (a pipelined tree's NVLink hops end before its NIC hops, and vice versa).
        self._solve(unchanged=len(self._route) > 0 and not self._live_overlaps(on))
        self._note_loads()
        self._schedule_next()

    def _finish(self, done: np.ndarray) -> None:
        bid, index = self._bid[done], self._index[done]
        if not len(bid):
            return
        single = bid[0] == bid[-1]
        route, extra = self._route[done], self._extra[done]
        lat = self._latency_table()[route]
        for b in ([int(bid[0])] if single else unique(bid).tolist()):
            t = self._batches[b]
            sel = slice(None) if single else bid == b
            rec = self._learning.get(b)
            if rec is not None:
                rec.bw_done[index[sel]] = self.env.now - rec.start
            if t.with_latency:
                arrival = self.env.now + lat[sel] + extra[sel]
                t._last_arrival = max(t._last_arrival, float(arrival.max()))
            else:
                arrival = self.env.now
                t._last_arrival = self.env.now
            t.finish[index[sel]] = arrival
            t._pending -= len(index) if single else int(sel.sum())
            if t._pending == 0:
                del self._batches[b]
                if rec is not None:
                    self._learn(b, rec)
                self._deliver(t)

    # ---- closed forms: learning, replays and runs ----------------------------------------------------------
    def _learn(self, bid: int, rec: Learning) -> None:
        """A batch ran alone on its links from start to end: keep its trajectory to replay it next time."""
        self._forget(bid)
        self._solo_cache.put(rec.key, Trajectory(rec.bw_done, np.asarray(rec.seg_starts), np.vstack(rec.seg_rates)))

    def _forget(self, bid: int) -> None:
        rec = self._learning.pop(bid)
        self._learner[rec.links] = 0

    def _hold(self, rep: Replay) -> Replay:
        self._next_rid += 1
        self._replays[rep.rid] = rep
        self._owner_stale = True
        return rep

    def _release(self, rep: Replay) -> None:
        del self._replays[rep.rid]
        self._owner_stale = True
        rep.token += 1

    def _owners(self) -> np.ndarray:
        """The replay holding each link, plus one (0: none), brought up to date only when asked: a plan that
        replays step after step on an otherwise idle network never needs it. Only the links marked before are
        cleared."""
        if self._owner_stale:
            self._owner[self._owned] = 0
            for rid, rep in self._replays.items():
                self._owner[rep.links] = rid + 1
            self._owned = np.concatenate([rep.links for rep in self._replays.values()]) if self._replays \
                else self._owned[:0]
            self._owner_stale = False
        return self._owner

    def _held(self, links: np.ndarray) -> bool:
        """Whether a replay holds any of `links`."""
        return bool(self._replays) and bool(self._owners()[links].any())

    def _timer(self, rep: Replay, delay: float) -> None:
        ev = self.env.timeout(max(delay, 0.0), value=(rep.rid, rep.token))
        ev.callbacks.append(self._on_replay_done)

    def _timer_at(self, rep: Replay, when: float) -> None:
        """A replay timer at exactly `when` (now + (when - now) can round away from it by an ulp; the timers of
        steps replayed one by one land on start + duration exactly, and so must these)."""
        self._timer(rep, delay_to(self.env.now, when))

    def _replay(self, t: Transfer, trajectory: Trajectory, wire: np.ndarray, links: np.ndarray) -> None:
        self.stats["closed_form"] += 1
        rep = self._hold(Replay(self._next_rid, t, self.env.now, trajectory, wire, links))
        self._timer(rep, trajectory.duration)

    def _on_replay_done(self, event) -> None:
        rid, token = event.value
        rep = self._replays.get(rid)
        if rep is None or rep.token != token:
            return
        self._release(rep)
        if rep.run is None:
            offsets = rep.trajectory.offsets
            self._note_replayed(rep, np.inf)
            self._complete_replayed(rep.transfer, rep.start + offsets, np.ones(len(offsets), dtype=bool))
        else:
            self._end_run(rep.run, rep.run.steps, None)

    def _complete_replayed(self, t: Transfer, bw_done: np.ndarray, which: np.ndarray) -> None:
        """Mark flows `which` of a replayed batch as having sent their last byte at bw_done."""
        arrival = bw_done[which]
        if t.with_latency:
            arrival = arrival + self.latency_of(t)[which]
        t.finish[which] = arrival
        t._pending -= int(which.sum())
        t._last_arrival = max(t._last_arrival, float(np.max(arrival)) if len(arrival) else t._last_arrival)
        if t._pending == 0:
            self._deliver(t)

    def _cut(self, rep: Replay, live: bool) -> None:
        """Stop replaying now. A single batch becomes live flows (live=True). A run ends after its completed
        steps; its step in flight becomes live flows (live=True) or a replay of its own."""
        self._release(rep)
        now = self.env.now
        run = rep.run
        if run is None:
            self._note_replayed(rep, now - rep.start)
            self._go_live(rep.transfer, rep.start, rep.trajectory, rep.wire)
            return
        j = max(int(np.searchsorted(run.starts, now, side="right")) - 1, 0)
        elapsed = now - float(run.starts[j])
        if (rep.trajectory.offsets <= elapsed * (1 + 1e-12)).all():
            self._end_run(run, j + 1, None)
            return
        step = run.template
        start = float(run.starts[j])
        t = Transfer(step.src, step.dst, step.payload, step.route, start, self.env.event(), step.label, step.extra,
                     np.full(len(step.src), np.nan), step.pattern, len(step.src), start, step.weight, False, step.tags)
        if live:
            self._go_live(t, start, rep.trajectory, run.wire)
        else:
            inflight = self._hold(Replay(self._next_rid, t, start, rep.trajectory, run.wire, rep.links))
            self._timer_at(inflight, start + rep.trajectory.duration)
        self._end_run(run, j, t)

    def _end_run(self, run: Run, completed: int, inflight: Transfer | None) -> None:
        run.completed, run.inflight, run.cut = completed, inflight, completed < run.steps
        flows = float(run.template.weight.sum())
        self.stats["transfers"] += completed + (inflight is not None)
        self.stats["flows"] += int(flows * (completed + (inflight is not None)))
        self.stats["closed_form"] += completed + (inflight is not None)
        run.done.succeed(run)

    def _go_live(self, t: Transfer, start: float, trajectory: Trajectory, wire: np.ndarray) -> None:
        """Turn a replayed batch back into live flows (something else is about to share its links)."""
        elapsed = self.env.now - start
        offsets = trajectory.offsets
        done = offsets <= elapsed * (1 + 1e-12)
        if done.any():
            self._complete_replayed(t, start + offsets, done)
        live = ~done
        if live.any():
            self._add_live(t, (wire - trajectory.sent(elapsed))[live], rates=trajectory.rates_at(elapsed)[live],
                           index=np.flatnonzero(live))
        self._note_loads()

    # ---- link loads, for reports (only with a recorder that keeps them) -----------------------------------
    def _loads(self, route: np.ndarray, rate: np.ndarray) -> np.ndarray:
        """Bytes/s on every link of flows on routes `route` at `rate` each."""
        on, n = self.cluster.links_crossed(route)
        return np.bincount(on, weights=np.repeat(rate, n), minlength=len(self.capacity))

    def _note_loads(self) -> None:
        """Record the live flows' link loads from now on."""
        if self.link_loads is not None:
            self.link_loads.set(self.env.now, self._loads(self._route, self._rate * self._weight))

    def _note_replayed(self, rep: Replay, upto: float) -> None:
        """Record a replayed batch's link loads: its segments that began before `upto` (seconds after its start);
        run to the end (upto = inf), the loads drop to zero when its last byte is sent."""
        if self.link_loads is None:
            return
        tr, t = rep.trajectory, rep.transfer
        if tr.seg_loads is None:
            tr.seg_loads = np.vstack([self._loads(t.route, rates * t.weight) for rates in tr.seg_rates])
        for begin, load in zip(tr.seg_starts.tolist(), tr.seg_loads):
            if begin >= upto:
                break
            self.link_loads.set(rep.start + begin, load)
        if upto == np.inf:
            self.link_loads.set(rep.start + tr.duration, np.zeros(len(self.capacity)))

    def _deliver(self, b: Transfer) -> None:
        if self.recorder is not None:
            self.recorder.flows(b)
        delay = b._last_arrival - self.env.now
        if delay <= 0:
            b.done.succeed(b)
        else:
            ev = self.env.timeout(delay, value=b)
            ev.callbacks.append(lambda e: b.done.succeed(b))
