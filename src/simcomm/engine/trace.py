"""The timeline of a simulation: every flow, memory operation, compute span and collective, with its times.

Rows are kept as numpy chunks (one per batch) so recording costs little per flow. With "flows" detail the
recorder also keeps each link's load (bytes/s on the wire, as the max-min solver assigned it) as a step function:
only the links whose load changed, per change. `detail="steps"` is for very large runs: no per-flow rows or link
loads, and the per-rank work inside a collective's steps (its reductions) is kept as one aggregate row per step or
run of identical steps (`step_rows`), so memory grows with ranks plus steps, not with ranks x steps; operations
(collectives, compute, memory_op, p2p) are still kept per rank. Each record carries structured tags (e.g.
collective, algorithm, protocol, stage, microbatch, layer, phase, axis) that reports read directly; `label` is text
for people.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

NO_TAGS: Mapping = MappingProxyType({})

import numpy as np

from ..arrays import filled
from ..errors import SimcommError

DETAILS = ("flows", "steps")  # what a Recorder keeps: every flow, or only aggregated steps
AUTO_FLOWS_MAX_RANKS = 64  # detail "auto" records every flow up to this many ranks


def resolve_detail(requested: str | None, ranks: int) -> str:
    """Detail "auto" (or None) records every flow up to AUTO_FLOWS_MAX_RANKS ranks, only steps beyond: a large
    run costs no more than "steps" unless every flow is asked for."""
    if requested in (None, "auto"):
        return "flows" if ranks <= AUTO_FLOWS_MAX_RANKS else "steps"
    return requested


@dataclass(frozen=True)
class Activity:
    """One recorded activity: who, what, when, how many bytes, over which links."""

    rank: int
    kind: str  # "send", "hbm", "compute", "collective", "recv_wait", ...
    start: float
    end: float
    nbytes: float
    label: str = ""
    peer: int = -1
    links: tuple[int, ...] = ()
    tags: Mapping = field(default_factory=lambda: NO_TAGS, compare=False)
    group: tuple[int, ...] = ()  # a collective's ranks (every member's record holds the same tuple)


@dataclass(frozen=True)
class StepRow:
    """The per-rank work of `steps` identical collective steps, aggregated ("steps" detail)."""

    kind: str
    label: str
    steps: int
    ranks: int  # ranks that worked in each step
    start: float  # of the first step's earliest work
    end: float  # of the last step's latest work
    amount: float  # over all ranks and steps
    tags: Mapping = field(default_factory=lambda: NO_TAGS, compare=False)


class Recorder:
    """Collects activities; `detail` is "flows" (everything) or "steps" (no per-flow rows)."""

    def __init__(self, cluster, detail: str = "flows"):
        if detail not in DETAILS:
            raise SimcommError(f"detail must be one of {', '.join(map(repr, DETAILS))}, got {detail!r}")
        self.cluster = cluster
        self.detail = detail
        self._flows: list[tuple] = []
        self._spans: list[tuple] = []
        self._ops: list[tuple] = []
        self._step_rows: list[StepRow] = []
        self.link_loads = LinkLoads(len(cluster.link_capacity)) if detail == "flows" else None
        self._deferred: list = []

    def flows(self, transfer) -> None:
        if self.detail == "flows":
            self._flows.append((transfer.src, transfer.dst, transfer.start, transfer.finish.copy(),
                                transfer.nbytes * transfer.weight, transfer.route, transfer.label, transfer.tags))

    def spans(self, kind: str, ranks, start, end, amount, label: str = "", tags: Mapping = NO_TAGS) -> None:
        """The same operation on several ranks (start, end and amount scalars or one per rank)."""
        self._spans.append((kind, np.array(ranks), np.array(start, dtype=float), np.array(end, dtype=float),
                            filled(amount, np.shape(ranks)), label,
                            tags))

    def step_spans(self, kind: str, ranks, start, end, amount, label: str = "", tags: Mapping = NO_TAGS,
                   steps: int = 1) -> None:
        """Work done inside a collective step (a reduction on each of `ranks`): every rank's span in "flows"
        detail, one aggregate row in "steps" detail. `steps` > 1 aggregates that many identical steps (then
        start is the first step's, end the last step's, amount one step's); only "steps" detail accepts it."""
        if self.detail == "flows":
            if steps != 1:
                raise ValueError("per-rank spans are recorded step by step")
            self.spans(kind, ranks, start, end, amount, label, tags)
            return
        n = int(np.size(ranks))
        total = float(np.sum(np.broadcast_to(np.asarray(amount, dtype=float), np.shape(ranks))))
        self._step_rows.append(StepRow(kind, label, steps, n, float(np.min(start)), float(np.max(end)),
                                       total * steps, tags))

    def step_rows(self) -> list[StepRow]:
        """The aggregated step rows ("steps" detail), in the order they were recorded."""
        return list(self._step_rows)

    def op(self, rank: int, kind: str, start: float, end: float, nbytes: float, label: str = "", peer: int = -1,
           tags: Mapping = NO_TAGS):
        """A rank-level operation: a collective call, a blocking wait, a p2p call."""
        self._ops.append((rank, kind, start, end, nbytes, label, peer, tags))

    def sends(self, src: np.ndarray, dst: np.ndarray, start: float, ends: np.ndarray, nbytes: np.ndarray,
              label: str, tags: Mapping = NO_TAGS) -> None:
        """op(s, "p2p", start, end, nbytes, label or f"send {s}->{d}", d, tags) for each flow s -> d of a send,
        kept as one entry until the timeline is read."""
        self._ops.append((src, dst, start, ends, nbytes, label, tags))

    def deferred(self, produce) -> None:
        """Activities made only when the timeline is read: `produce(kernels)` returns them (a training step's
        replayed layer blocks cost nothing unless someone looks; `kernels`: with the kernels inside them too)."""
        self._deferred.append(produce)

    @property
    def flow_count(self) -> int:
        return sum(len(f[0]) for f in self._flows)

    def activities(self, kernels: bool = False) -> list[Activity]:
        """Every recorded activity, sorted by (start, rank, kind) so equal runs give equal lists; `kernels`: the
        deferred ones down to each kernel (what a per-rank profiler trace shows), not only the blocks."""
        out: list[Activity] = []
        links = self.cluster.route_links
        for src, dst, start, finish, nbytes, route, label, tags in self._flows:
            for s, d, f, b, r in zip(src.tolist(), dst.tolist(), finish.tolist(), nbytes.tolist(), route.tolist()):
                out.append(Activity(s, "send", start, f, b, label, d, tuple(links[r].tolist()), tags))
        for kind, ranks, start, end, amount, label, tags in self._spans:
            members = ranks.tolist()
            group = tuple(members) if kind == "collective" else ()
            for r, s, e, a in zip(members, np.broadcast_to(start, ranks.shape).tolist(),
                                  np.broadcast_to(end, ranks.shape).tolist(), amount.tolist()):
                out.append(Activity(r, kind, s, e, a, label, tags=tags, group=group))
        for op in self._ops:
            if len(op) == 8:
                rank, kind, start, end, nbytes, label, peer, tags = op
                out.append(Activity(rank, kind, start, end, nbytes, label, peer, tags=tags))
                continue
            src, dst, start, ends, nbytes, label, tags = op  # a send's flows (sends())
            for s, d, b, f in zip(src.tolist(), dst.tolist(), nbytes.tolist(), ends.tolist()):
                out.append(Activity(s, "p2p", start, f, b, label or f"send {s}->{d}", d, tags=tags))
        for produce in self._deferred:
            out.extend(produce(kernels))
        out.sort(key=lambda a: (a.start, a.rank, a.kind, a.end, a.peer, a.label))
        return out


def union(intervals) -> list[list[float]]:
    """(start, end) intervals merged: sorted, disjoint [start, end] lists (the time records cover)."""
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(intervals) -> float:
    """The time merged intervals cover."""
    return sum(e - s for s, e in intervals)


def overlap(a, b) -> float:
    """The time two lists of merged intervals (union's) share."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


class LinkLoads:
    """Every link's load over time as step functions, fed by the flow engine whenever the rates change.

    Stored compactly: per change instant, the links whose load changed and their new loads (bytes/s, wire bytes).
    A load holds until the link's next change; several changes at one instant keep the last.
    """

    def __init__(self, num_links: int):
        self._last = np.zeros(num_links)
        self._times: list[float] = []
        self._links: list[np.ndarray] = []
        self._loads: list[np.ndarray] = []

    def set(self, time: float, load: np.ndarray) -> None:
        """Every link's load from `time` on (a dense vector, one entry per link)."""
        changed = np.flatnonzero(load != self._last)
        if len(changed):
            self._times.append(time)
            self._links.append(changed)
            self._loads.append(load[changed])
            self._last = load

    def steps(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """link -> (change times, load from each time to the next), for every link that ever carried load."""
        if not self._times:
            return {}
        counts = [len(x) for x in self._links]
        times = np.repeat(np.asarray(self._times), counts)
        links = np.concatenate(self._links)
        loads = np.concatenate(self._loads)
        order = np.argsort(links, kind="stable")  # changes were appended in time order
        times, links, loads = times[order], links[order], loads[order]
        # one value per (link, instant): the last
        last = np.append((links[1:] != links[:-1]) | (times[1:] != times[:-1]), True)
        times, links, loads = times[last], links[last], loads[last]
        bounds = np.flatnonzero(np.diff(links)) + 1
        return {int(ls[0]): (t, r) for t, ls, r in zip(np.split(times, bounds), np.split(links, bounds),
                                                       np.split(loads, bounds))}
