"""The timeline of a simulation: every flow, memory operation, compute span and collective, with its times.

Rows are kept as numpy chunks (one per batch) so recording costs little per flow; `detail="steps"` keeps only
spans and collectives for very large runs. Each record carries structured tags (e.g. collective, algorithm,
protocol, stage, microbatch, layer, phase, axis) that reports read directly; `label` is text for people.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

NO_TAGS: Mapping = MappingProxyType({})

import numpy as np


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


class Recorder:
    """Collects activities; `detail` is "flows" (everything) or "steps" (no per-flow rows)."""

    def __init__(self, cluster, detail: str = "flows"):
        if detail not in ("flows", "steps"):
            raise ValueError(f"detail must be 'flows' or 'steps', got {detail!r}")
        self.cluster = cluster
        self.detail = detail
        self._flows: list[tuple] = []
        self._spans: list[tuple] = []
        self._ops: list[tuple] = []

    def flows(self, transfer) -> None:
        if self.detail == "flows":
            self._flows.append((transfer.src, transfer.dst, transfer.start, transfer.finish.copy(),
                                transfer.nbytes * transfer.weight, transfer.route, transfer.label, transfer.tags))

    def spans(self, kind: str, ranks, start, end, amount, label: str = "", tags: Mapping = NO_TAGS) -> None:
        """The same operation on several ranks (start, end and amount scalars or one per rank)."""
        self._spans.append((kind, np.array(ranks), np.array(start, dtype=float), np.array(end, dtype=float),
                            np.broadcast_to(np.asarray(amount, dtype=float), np.shape(ranks)).copy(), label,
                            tags))

    def op(self, rank: int, kind: str, start: float, end: float, nbytes: float, label: str = "", peer: int = -1,
           tags: Mapping = NO_TAGS):
        """A rank-level operation: a collective call, a blocking wait, a p2p call."""
        self._ops.append((rank, kind, start, end, nbytes, label, peer, tags))

    @property
    def flow_count(self) -> int:
        return sum(len(f[0]) for f in self._flows)

    def activities(self) -> list[Activity]:
        """Every recorded activity, sorted by (start, rank, kind) so equal runs give equal lists."""
        out: list[Activity] = []
        links = self.cluster.route_links
        for src, dst, start, finish, nbytes, route, label, tags in self._flows:
            for s, d, f, b, r in zip(src.tolist(), dst.tolist(), finish.tolist(), nbytes.tolist(), route.tolist()):
                out.append(Activity(s, "send", start, f, b, label, d, tuple(links[r].tolist()), tags))
        for kind, ranks, start, end, amount, label, tags in self._spans:
            for r, s, e, a in zip(ranks.tolist(), np.broadcast_to(start, ranks.shape).tolist(),
                                  np.broadcast_to(end, ranks.shape).tolist(), amount.tolist()):
                out.append(Activity(r, kind, s, e, a, label, tags=tags))
        for rank, kind, start, end, nbytes, label, peer, tags in self._ops:
            out.append(Activity(rank, kind, start, end, nbytes, label, peer, tags=tags))
        out.sort(key=lambda a: (a.start, a.rank, a.kind, a.end, a.peer, a.label))
        return out
