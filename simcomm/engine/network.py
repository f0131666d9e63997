"""Flow-level network: a transfer is a batch of flows; bandwidth is shared max-min fairly on every link.

Events: one re-solve per instant at which flows start (however many start then), one timer per instant at which
flows finish, and one delivery event per batch. A flow takes its route's bandwidth share until its bytes are sent,
then arrives after the route's latency, so an uncontended flow takes exactly latency + bytes / bottleneck.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from .maxmin import max_min_rates


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


class FlowNetwork:
    """The links of a cluster and the flows crossing them."""

    def __init__(self, env: simpy.Environment, cluster, recorder=None):
        self.env = env
        self.cluster = cluster
        self.recorder = recorder
        self.capacity = cluster.link_capacity
        # Active flows, in start order (a batch's flows stay contiguous and ordered).
        self._route = np.empty(0, dtype=np.int64)
        self._remaining = np.empty(0)
        self._rate = np.empty(0)
        self._extra = np.empty(0)
        self._bid = np.empty(0, dtype=np.int64)  # batch id of each flow
        self._index = np.empty(0, dtype=np.int64)  # position of each flow inside its batch
        self._batches: dict[int, Transfer] = {}
        self._next_bid = 0
        self._latency = np.empty(0)  # numpy mirror of cluster.route_latency
        self._updated = 0.0
        self._generation = 0
        self._resolve_pending = False
        self._routes_cache: dict[bytes, np.ndarray] = {}
        self._rates_cache: dict[tuple, np.ndarray] = {}
        self.stats = {"transfers": 0, "flows": 0, "solves": 0, "solve_cache_hits": 0}

    # ---- public ------------------------------------------------------------------------------------------
    def transfer(self, src, dst, nbytes, label: str = "", extra_latency=0.0, wire_factor: float = 1.0,
                 routes=None) -> Transfer:
        """Start flows src[i] -> dst[i] of nbytes[i] bytes now.

        `extra_latency` (scalar or per flow) is added to each flow's arrival (a protocol's software overhead);
        `wire_factor` scales the bytes put on the wire (a protocol that sends flags with the data) without changing
        the payload that is reported. `routes` gives explicit route ids (see Cluster.path_route) instead of the
        rank-to-rank routes.
        """
        src = np.atleast_1d(np.asarray(src, dtype=np.int64))
        dst = np.atleast_1d(np.asarray(dst, dtype=np.int64))
        payload = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape).copy()
        if routes is not None:
            route = np.asarray(routes, dtype=np.int64)
            pattern = b"R" + route.tobytes()
        else:
            pattern = src.tobytes() + b"|" + dst.tobytes()
            route = self._routes_cache.get(pattern)
            if route is None:
                route = self.cluster.route_ids(src, dst)
                if len(self._routes_cache) < 4096:
                    self._routes_cache[pattern] = route
        extra = np.broadcast_to(np.asarray(extra_latency, dtype=np.float64), src.shape)
        t = Transfer(src, dst, payload, route, self.env.now, self.env.event(), label, extra,
                     np.full(len(src), np.nan), pattern, len(src), self.env.now)
        self.stats["transfers"] += 1
        self.stats["flows"] += len(src)
        if len(src) == 0:
            t.done.succeed(t)
            return t
        self._advance()
        bid = self._next_bid
        self._next_bid += 1
        self._batches[bid] = t
        self._route = np.concatenate([self._route, route])
        self._remaining = np.concatenate([self._remaining, payload * wire_factor])
        self._rate = np.concatenate([self._rate, np.zeros(len(src))])
        self._extra = np.concatenate([self._extra, extra])
        self._bid = np.concatenate([self._bid, np.full(len(src), bid)])
        self._index = np.concatenate([self._index, np.arange(len(src))])
        if not self._resolve_pending:
            self._resolve_pending = True
            ev = self.env.timeout(0)
            ev.callbacks.append(self._on_resolve)
        return t

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
        self._schedule_next()

    def _solve(self) -> None:
        if not len(self._route):
            return
        self.stats["solves"] += 1
        bids = np.unique(self._bid)
        batches = [self._batches[b] for b in bids.tolist()]
        full = all(b._pending == len(b.src) for b in batches)
        key = tuple(b.pattern for b in batches) if full else None
        cached = self._rates_cache.get(key) if key is not None else None
        if cached is not None:
            self.stats["solve_cache_hits"] += 1
            self._rate = cached
            return
        classes, inverse, counts = np.unique(self._route, return_inverse=True, return_counts=True)
        links = [self.cluster.route_links[r] for r in classes]
        self._rate = max_min_rates(links, counts, self.capacity)[inverse]
        if key is not None and len(self._rates_cache) < 4096:
            self._rates_cache[key] = self._rate

    def _schedule_next(self) -> None:
        self._generation += 1
        if not len(self._route):
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            ttf = np.where(self._rate == np.inf, 0.0, self._remaining / self._rate)
        dt = max(float(ttf.min()), 0.0)
        ev = self.env.timeout(dt, value=self._generation)
        ev.callbacks.append(self._on_timer)

    def _on_timer(self, event) -> None:
        if event.value != self._generation:
            return  # superseded by a later re-solve
        self._advance()
        with np.errstate(divide="ignore", invalid="ignore"):
            ttf = np.where(self._rate == np.inf, 0.0, self._remaining / self._rate)
        # Flows within a relative hair of finishing finish now: float error must not cost an extra event.
        done = ttf <= 1e-12 * max(self.env.now, 1e-9) + 1e-18
        self._finish(done)
        keep = ~done
        for name in ("_route", "_remaining", "_rate", "_extra", "_bid", "_index"):
            setattr(self, name, getattr(self, name)[keep])
        self._solve()
        self._schedule_next()

    def _finish(self, done: np.ndarray) -> None:
        lat = self.cluster.route_latency
        if len(self._latency) != len(lat):
            self._latency = np.asarray(lat, dtype=np.float64)
        route, bid, index = self._route[done], self._bid[done], self._index[done]
        arrival = self.env.now + self._latency[route] + self._extra[done]
        for b in np.unique(bid).tolist():
            sel = bid == b
            t = self._batches[b]
            t.finish[index[sel]] = arrival[sel]
            t._pending -= int(sel.sum())
            t._last_arrival = max(t._last_arrival, float(arrival[sel].max()))
            if t._pending == 0:
                del self._batches[b]
                self._deliver(t)

    def _deliver(self, b: Transfer) -> None:
        if self.recorder is not None:
            self.recorder.flows(b)
        delay = b._last_arrival - self.env.now
        if delay <= 0:
            b.done.succeed(b)
        else:
            ev = self.env.timeout(delay, value=b)
            ev.callbacks.append(lambda e: b.done.succeed(b))
