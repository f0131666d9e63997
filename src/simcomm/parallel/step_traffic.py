"""The step's network operations on a Session, with identical uncontended collectives replayed.

A training step repeats the same collective on the same group many times (a gradient bucket per few layers, a
ZeRO-3 gather per layer and micro-batch). Running each on the engine costs its full plan; but a collective whose
links carry nothing else takes exactly the time it took the last time it ran alone. So each collective goes
through `Traffic`:

- it runs on the engine (a real collective) unless an identical one (kind, ranks, size, dtype) already ran
  uncontended *and* none of this one's links is busy when it starts; then it is replayed: it takes the recorded
  time and is recorded like the original (tags carry `replayed: True`).
- a real collective is remembered only if nothing else touched its links while it ran.
- a group's links are those of its ring in rank order, both directions (every algorithm's traffic crosses them);
  a send's are its routes.

The one approximation: traffic that starts on a replayed collective's links while it runs neither slows it nor
is slowed by it. `stats['late_overlaps']` counts such starts; reports print it.
"""
from __future__ import annotations

import numpy as np

from ..engine import when_all
from ..session import CollectiveRecord, Op, Session


class Traffic:
    """Issues collectives and sends on `session`; replays identical uncontended collectives when `reuse`. With
    `ideal`, every operation completes at once (the network costs nothing)."""

    def __init__(self, session: Session, *, reuse: bool = True, ideal: bool = False):
        self.s = session
        self.env = session.env
        self.cluster = session.cluster
        self.reuse = reuse
        self.ideal = ideal
        self._group_links: dict[bytes, frozenset] = {}
        self._pair_links: dict[bytes, frozenset] = {}
        self._by_arrays: dict[tuple, tuple] = {}  # (ids of a send's src, dst) -> (src, dst, links of its routes)
        self._cache: dict[tuple, CollectiveRecord] = {}
        self._live: list[list] = []  # collectives in flight: [op, links, contended, replayed]
        self._sends: list[tuple] = []  # sends in flight (op, links), the processed ones dropped now and then
        self._sends_kept = 0  # sends left after the last drop
        self.stats = {"real": 0, "replayed": 0, "late_overlaps": 0, "sends": 0}

    # ---- links -------------------------------------------------------------------------------------------------
    def links_of_routes(self, src, dst) -> frozenset:
        src = np.atleast_1d(np.asarray(src, dtype=np.int64))
        dst = np.atleast_1d(np.asarray(dst, dtype=np.int64))
        key = src.tobytes() + b"|" + dst.tobytes()
        got = self._pair_links.get(key)
        if got is None:
            crossed, _ = self.cluster.links_crossed(np.unique(self.cluster.route_ids(src, dst)))
            got = frozenset(np.unique(crossed).tolist())
            self._pair_links[key] = got
        return got

    def _send_links(self, src, dst) -> frozenset:
        """links_of_routes for the rank arrays of a send, remembered by identity (a schedule sends between the
        same stages' arrays thousands of times)."""
        got = self._by_arrays.get((id(src), id(dst)))
        if got is None or got[0] is not src or got[1] is not dst:
            if len(self._by_arrays) >= 256:
                self._by_arrays.clear()
            got = self._by_arrays[id(src), id(dst)] = (src, dst, self.links_of_routes(src, dst))  # holds them
        return got[2]

    def group_links(self, ranks) -> frozenset:
        """Links of the group's ring in rank order, both directions."""
        ranks = np.asarray(ranks, dtype=np.int64)
        key = ranks.tobytes()
        got = self._group_links.get(key)
        if got is None:
            nxt = np.roll(ranks, -1)
            got = self.links_of_routes(np.r_[ranks, nxt], np.r_[nxt, ranks]) if len(ranks) > 1 else frozenset()
            self._group_links[key] = got
        return got

    # ---- bookkeeping -------------------------------------------------------------------------------------------
    def _begin(self, op: Op, links: frozenset, replayed: bool) -> bool:
        """Register collective `op` as in flight; returns whether any live operation shares a link with it (and
        marks the collectives among those contended)."""
        busy = self._contend(links)
        busy = self._sends_on(links) or busy
        self._live.append([op, links, busy, replayed])
        return busy

    def _begin_send(self, op: Op, links: frozenset) -> None:
        """Register send `op` as in flight (only whether it is, and its links, are ever read)."""
        self._contend(links)
        if len(self._sends) > 2 * self._sends_kept + 64:
            self._sends = [x for x in self._sends if x[0].callbacks is not None]  # unprocessed
            self._sends_kept = len(self._sends)
        self._sends.append((op, links))

    def _contend(self, links: frozenset) -> bool:
        """Whether a collective in flight shares one of `links`; marks those that do contended (and counts the
        replayed ones: late overlaps)."""
        self._live = [x for x in self._live if x[0].callbacks is not None]  # unprocessed
        busy = False
        for entry in self._live:
            if not entry[1].isdisjoint(links):
                busy = True
                entry[2] = True
                if entry[3]:
                    self.stats["late_overlaps"] += 1
        return busy

    def _sends_on(self, links: frozenset) -> bool:
        return any(not x[1].isdisjoint(links) for x in self._sends if x[0].callbacks is not None)

    def _after(self, after, body) -> None:
        deps = [e for e in (after or ()) if not e.processed]
        if not deps:
            body()
            return
        when_all(self.env, deps, body)

    def _instant(self, kind: str, ranks, tags) -> Op:
        op = Op(self.env, kind, np.atleast_1d(np.asarray(ranks, dtype=np.int64)), dict(tags or {}))
        op.start = op.end = self.env.now
        op.succeed()
        return op

    # ---- operations --------------------------------------------------------------------------------------------
    def collective(self, kind: str, ranks, size: float, dtype: str, *, after=(), tags=None) -> Op:
        """A collective over `ranks` of nccl-tests size S = `size` bytes; an Op that fires when it completes."""
        ranks = np.asarray(ranks, dtype=np.int64)
        if self.ideal or len(ranks) < 2 or size <= 0:
            if not after:
                return self._instant("collective", ranks, tags)
            out = Op(self.env, "collective", ranks, dict(tags or {}))
            self._after(after, lambda: (setattr(out, "start", self.env.now), setattr(out, "end", self.env.now),
                                        out.succeed()))
            return out
        key = (kind, ranks.tobytes(), int(size), dtype)
        out = Op(self.env, "collective", ranks, dict(tags or {}))

        def body():
            links = self.group_links(ranks)
            cached = self._cache.get(key) if self.reuse else None
            live_links = any(not e[1].isdisjoint(links) for e in self._live if not e[0].processed) or \
                self._sends_on(links)
            if cached is not None and not live_links:
                self._replay(out, cached, ranks, links)
                return
            self.stats["real"] += 1
            op = self.s.collective(kind, ranks, size=int(size), dtype=dtype, tags=tags)
            entry_busy = self._begin(op, links, False)
            entry = self._live[-1]
            out.start = self.env.now

            def done(_e):
                rec = op.record
                if not entry_busy and not entry[2]:
                    self._cache.setdefault(key, rec)
                out.record, out.tags, out.end = rec, rec.tags, self.env.now
                out.succeed(rec)
            op.callbacks.append(done)
        self._after(after, body)
        return out

    def _replay(self, out: Op, rec: CollectiveRecord, ranks: np.ndarray, links: frozenset) -> None:
        self.stats["replayed"] += 1
        now = self.env.now
        tags = {**rec.tags, **out.tags, "algorithm": rec.algorithm, "protocol": rec.protocol, "replayed": True}
        new = CollectiveRecord(rec.collective, rec.ranks, rec.size, rec.count, rec.dtype, rec.op, rec.root,
                               rec.algorithm, rec.protocol, rec.predicted, now, now + rec.time, tags,
                               rec.channels)
        out.start, out.record, out.tags = now, new, tags
        self._begin(out, links, True)
        self.s.occupy(ranks, rec.channels, until=out)  # its kernel's SMs, as the real run held them
        label = f"{rec.collective} {rec.algorithm}/{rec.protocol}"

        def finish(_e):
            out.end = self.env.now
            self.s.sim.recorder.spans("collective", ranks, now, out.end, rec.size, label, tags)
            out.succeed(new)
        self.env.timeout(rec.time).callbacks.append(finish)

    def send(self, src, dst, nbytes: float, *, after=(), tags=None) -> Op:
        """Point-to-point src[i] -> dst[i] of nbytes each; fires when the last byte has arrived."""
        if self.ideal or nbytes <= 0:
            if not after:
                return self._instant("p2p", src, tags)
            out = Op(self.env, "p2p", np.atleast_1d(np.asarray(src)), dict(tags or {}))
            self._after(after, lambda: (setattr(out, "start", self.env.now), setattr(out, "end", self.env.now),
                                        out.succeed()))
            return out
        self.stats["sends"] += 1
        op = self.s.send(src, dst, nbytes, after=after, tags=tags)
        links = self._send_links(src, dst)

        def started():
            self._begin_send(op, links)
        if op.start is None:
            op.on_start = started  # in the event that starts it, not one of its own
        else:
            started()
        return op
