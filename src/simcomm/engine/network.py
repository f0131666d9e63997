"""Flow-level network: a transfer is a batch of flows; bandwidth is shared max-min fairly on every link.

Events: one re-solve per instant at which flows start (however many start then), one timer per instant at which
flows finish, and one delivery event per batch. A flow takes its route's bandwidth share until its bytes are sent,
then arrives after the route's latency, so an uncontended flow takes exactly latency + bytes / bottleneck.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import simpy

from .maxmin import max_min_rates_csr
from .trace import NO_TAGS


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
class _Trajectory:
    """How a batch alone on the network progressed: when each flow sent its last byte (offsets from the start),
    and the rates of every flow in each segment between re-solves."""

    offsets: np.ndarray
    seg_starts: np.ndarray
    seg_rates: np.ndarray  # (segments, flows)
    seg_loads: np.ndarray | None = None  # (segments, links): link loads, computed when first needed


@dataclass(eq=False)
class _Learning:
    """A batch running alone whose trajectory is being recorded, to be replayed next time."""

    transfer: Transfer
    key: bytes
    start: float
    seg_starts: list
    seg_rates: list
    bw_done: np.ndarray


@dataclass(eq=False)
class _Replay:
    """A batch alone on the network, replaying a recorded trajectory instead of being solved."""

    transfer: Transfer
    start: float
    trajectory: _Trajectory
    wire: np.ndarray


@dataclass(eq=False)
class _Memo:
    """The last transfer's flow arrays by identity, with their routes: plans repeat a step's arrays."""

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
        # Active flows, in start order (a batch's flows stay contiguous and ordered).
        self._route = np.empty(0, dtype=np.int64)
        self._remaining = np.empty(0)
        self._rate = np.empty(0)
        self._extra = np.empty(0)
        self._weight = np.empty(0)
        self._bid = np.empty(0, dtype=np.int64)  # batch id of each flow
        self._index = np.empty(0, dtype=np.int64)  # position of each flow inside its batch
        self._batches: dict[int, Transfer] = {}
        self._next_bid = 0
        self._latency = np.empty(0)  # numpy mirror of cluster.route_latency
        self._updated = 0.0
        self._generation = 0
        self._resolve_pending = False
        self._routes_cache: dict[bytes, np.ndarray] = {}
        self._memo: _Memo | None = None
        self._rates_cache: dict[tuple, np.ndarray] = {}
        # Closed form for a batch alone on the network: its rate trajectory is replayed from a cache.
        self._solo_cache: dict[bytes, _Trajectory] = {}
        self._solo: _Replay | None = None
        self._recording: _Learning | None = None
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
        src = np.atleast_1d(np.asarray(src, dtype=np.int64))
        dst = np.atleast_1d(np.asarray(dst, dtype=np.int64))
        payload = np.full(src.shape, float(nbytes)) if np.isscalar(nbytes) else \
            np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape).copy()
        memo = self._memo
        if memo is not None and memo.src is src and memo.dst is dst and memo.weight is weight and \
                memo.routes is routes:
            pattern, route, w = memo.pattern, memo.route, memo.w  # a plan repeating its step: skip re-keying
        else:
            w = np.ones(len(src)) if weight is None else \
                np.broadcast_to(np.asarray(weight, dtype=float), src.shape).copy()
            if routes is not None:
                route = np.asarray(routes, dtype=np.int64)
                pattern = b"R" + route.tobytes() + w.tobytes()
            else:
                pattern = src.tobytes() + b"|" + dst.tobytes() + w.tobytes()
                route = self._routes_cache.get(pattern)
                if route is None:
                    route = self.cluster.route_ids(src, dst)
                    if len(self._routes_cache) > 4096:
                        self._routes_cache.clear()
                    self._routes_cache[pattern] = route
            self._memo = _Memo(src, dst, weight, routes, pattern, route, w)
        extra = np.broadcast_to(np.asarray(extra_latency, dtype=np.float64), src.shape)
        t = Transfer(src, dst, payload, route, self.env.now, self.env.event(), label, extra,
                     np.full(len(src), np.nan), pattern, len(src), self.env.now, w, with_latency, tags)
        self.stats["transfers"] += 1
        self.stats["flows"] += int(w.sum())
        if len(src) == 0:
            t.done.succeed(t)
            return t
        wire = payload * wire_factor
        idle = not len(self._route) and self._solo is None and not self._resolve_pending
        if not idle:
            self._materialize()
            self._recording = None  # no longer alone
        uniform = len(wire) and wire[0] == wire[-1] and (wire == wire[0]).all()
        solo_key = (pattern + b"#" + (wire[:1].tobytes() if uniform else wire.tobytes())) if idle else None
        if solo_key is not None and solo_key in self._solo_cache:
            self._replay(t, solo_key, wire)
            return t
        self._advance()
        bid = self._next_bid
        self._next_bid += 1
        self._batches[bid] = t
        if solo_key is not None:
            self._recording = _Learning(t, solo_key, self.env.now, [], [], np.full(len(src), np.nan))
        new = (route, wire, np.zeros(len(src)), extra, w, np.full(len(src), bid),
               np.arange(len(src)))
        names = ("_route", "_remaining", "_rate", "_extra", "_weight", "_bid", "_index")
        self._generation += 1  # any pending finish timer was computed for the old flow set
        if len(self._route):
            for name, arr in zip(names, new):
                setattr(self, name, np.concatenate([getattr(self, name), arr]))
        else:  # the common lockstep case: nothing else in flight
            for name, arr in zip(names, new):
                setattr(self, name, arr)
        if not self._resolve_pending:
            self._resolve_pending = True
            ev = self.env.timeout(0)
            ev.callbacks.append(self._on_resolve)
        return t

    def latency_of(self, t: Transfer) -> np.ndarray:
        """Per-flow latency of a transfer: its route's links plus its extra latency."""
        lat = self.cluster.route_latency
        if len(self._latency) != len(lat):
            self._latency = np.asarray(lat, dtype=np.float64)
        return self._latency[t.route] + t.extra_latency

    @property
    def active_flows(self) -> int:
        return len(self._route)

    # ---- internals ---------------------------------------------------------------------------------------
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

    def _solve(self) -> None:
        if not len(self._route):
            return
        self.stats["solves"] += 1
        # Batch ids are ascending in the active arrays, so one batch means equal ends.
        bids = [int(self._bid[0])] if self._bid[0] == self._bid[-1] else np.unique(self._bid).tolist()
        batches = [self._batches[b] for b in bids]
        # Rates depend only on which flows are active: the batches' patterns, and which of their flows remain.
        full = all(b._pending == len(b.src) for b in batches)
        key = tuple(b.pattern for b in batches) + (None if full else self._index.tobytes(),)
        cached = self._rates_cache.get(key)
        if cached is not None:
            self.stats["solve_cache_hits"] += 1
            self._rate = cached
            self._record_rates()
            return
        classes, inverse = np.unique(self._route, return_inverse=True)
        counts = np.bincount(inverse, weights=self._weight)
        lengths, starts, links = self.cluster.route_csr()
        self._rate = max_min_rates_csr(lengths[classes], starts[classes], links, counts, self.capacity)[inverse]
        if len(self._rates_cache) > 4096:
            self._rates_cache.clear()
        self._rates_cache[key] = self._rate
        self._record_rates()

    # ---- closed form for a batch alone on the network ----------------------------------------------------
    def _record_rates(self) -> None:
        rec = self._recording
        if rec is None:
            return
        full = np.zeros(len(rec.transfer.src))
        full[self._index] = self._rate
        rec.seg_starts.append(self.env.now - rec.start)
        rec.seg_rates.append(full)

    def _replay(self, t: Transfer, key: bytes, wire: np.ndarray) -> None:
        trajectory = self._solo_cache[key]
        self.stats["closed_form"] += 1
        self._generation += 1
        self._solo = _Replay(t, self.env.now, trajectory, wire)
        ev = self.env.timeout(float(trajectory.offsets.max()), value=self._generation)
        ev.callbacks.append(self._on_solo_done)

    def _on_solo_done(self, event) -> None:
        if event.value != self._generation or self._solo is None:
            return
        solo, self._solo = self._solo, None
        offsets = solo.trajectory.offsets
        self._note_replayed(solo, np.inf)
        self._complete_solo(solo.transfer, solo.start + offsets, np.ones(len(offsets), dtype=bool))

    def _complete_solo(self, t: Transfer, bw_done: np.ndarray, which: np.ndarray) -> None:
        """Mark flows `which` of a replayed batch as having sent their last byte at bw_done."""
        arrival = bw_done[which]
        if t.with_latency:
            lat = self.latency_of(t)[which]
            arrival = arrival + lat
        t.finish[which] = arrival
        t._pending -= int(which.sum())
        t._last_arrival = max(t._last_arrival, float(np.max(arrival)) if len(arrival) else t._last_arrival)
        if t._pending == 0:
            self._deliver(t)

    def _materialize(self) -> None:
        """Turn a replayed batch back into live flows (something else is about to share the network)."""
        if self._solo is None:
            return
        solo, self._solo = self._solo, None
        t, start, wire = solo.transfer, solo.start, solo.wire
        offsets, seg_starts, seg_rates = solo.trajectory.offsets, solo.trajectory.seg_starts, solo.trajectory.seg_rates
        self._generation += 1
        elapsed = self.env.now - start
        self._note_replayed(solo, elapsed)
        done = offsets <= elapsed * (1 + 1e-12)
        if done.any():
            self._complete_solo(t, start + offsets, done)
        ends = np.append(seg_starts[1:], np.inf)
        spans = np.clip(np.minimum(ends, elapsed) - seg_starts, 0, None)
        sent = spans @ seg_rates
        live = ~done
        if not live.any():
            self._note_loads()
            return  # it finished at this very instant
        bid = self._next_bid
        self._next_bid += 1
        self._batches[bid] = t
        k = int(np.searchsorted(seg_starts, elapsed, side="right")) - 1
        self._route, self._remaining = t.route[live], (wire - sent)[live]
        self._rate, self._extra = seg_rates[max(k, 0)][live], t.extra_latency[live]
        self._weight, self._bid = t.weight[live], np.full(int(live.sum()), bid)
        self._index = np.flatnonzero(live)
        self._updated = self.env.now
        self._note_loads()

    # ---- link loads, for reports (only with a recorder that keeps them) -----------------------------------
    def _loads(self, route: np.ndarray, rate: np.ndarray) -> np.ndarray:
        """Bytes/s on every link of flows on routes `route` at `rate` each."""
        lengths, starts, links = self.cluster.route_csr()
        n = lengths[route]
        offsets = np.repeat(starts[route] - (np.cumsum(n) - n), n)
        return np.bincount(links[np.arange(int(n.sum())) + offsets], weights=np.repeat(rate, n),
                           minlength=len(self.capacity))

    def _note_loads(self) -> None:
        """Record the live flows' link loads from now on."""
        if self.link_loads is not None:
            self.link_loads.set(self.env.now, self._loads(self._route, self._rate * self._weight))

    def _note_replayed(self, solo: _Replay, upto: float) -> None:
        """Record a replayed batch's link loads: its segments that began before `upto` (seconds after its start);
        run to the end (upto = inf), the loads drop to zero when its last byte is sent."""
        if self.link_loads is None:
            return
        tr, t = solo.trajectory, solo.transfer
        if tr.seg_loads is None:
            tr.seg_loads = np.vstack([self._loads(t.route, rates * t.weight) for rates in tr.seg_rates])
        for begin, load in zip(tr.seg_starts.tolist(), tr.seg_loads):
            if begin >= upto:
                break
            self.link_loads.set(solo.start + begin, load)
        if upto == np.inf:
            self.link_loads.set(solo.start + float(tr.offsets.max()), np.zeros(len(self.capacity)))

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
        self._finish(done)
        keep = ~done
        for name in ("_route", "_remaining", "_rate", "_extra", "_weight", "_bid", "_index"):
            arr = getattr(self, name)
            setattr(self, name, arr[:0] if not keep.any() else arr[keep])
        self._solve()
        self._note_loads()
        self._schedule_next()

    def _finish(self, done: np.ndarray) -> None:
        lat = self.cluster.route_latency
        if len(self._latency) != len(lat):
            self._latency = np.asarray(lat, dtype=np.float64)
        bid, index = self._bid[done], self._index[done]
        if not len(bid):
            return
        rec = self._recording
        if rec is not None:
            rec.bw_done[index] = self.env.now - rec.start
        single = bid[0] == bid[-1]
        for b in ([int(bid[0])] if single else np.unique(bid).tolist()):
            t = self._batches[b]
            sel = slice(None) if single else bid == b
            if t.with_latency:
                arrival = self.env.now + self._latency[self._route[done][sel]] + self._extra[done][sel]
                t._last_arrival = max(t._last_arrival, float(arrival.max()))
            else:
                arrival = self.env.now
                t._last_arrival = self.env.now
            t.finish[index[sel]] = arrival
            t._pending -= len(index) if single else int(sel.sum())
            if t._pending == 0:
                del self._batches[b]
                if rec is not None and rec.transfer is t:
                    self._learn(rec)
                self._deliver(t)

    def _learn(self, rec: _Learning) -> None:
        """A batch ran alone from start to end: keep its trajectory to replay it next time."""
        self._recording = None
        if len(self._solo_cache) > 1024:
            self._solo_cache.clear()
        self._solo_cache[rec.key] = _Trajectory(rec.bw_done, np.asarray(rec.seg_starts), np.vstack(rec.seg_rates))

    def _deliver(self, b: Transfer) -> None:
        if self.recorder is not None:
            self.recorder.flows(b)
        delay = b._last_arrival - self.env.now
        if delay <= 0:
            b.done.succeed(b)
        else:
            ev = self.env.timeout(delay, value=b)
            ev.callbacks.append(lambda e: b.done.succeed(b))
