"""Paths inside one node, as tables: every endpoint pair, endpoint -> its NIC and NIC -> endpoint.

A path is the widest one (highest bottleneck bandwidth, as NCCL's topology search prefers NVLink over PCIe), then
the lowest latency, then the fewest hops. Endpoints never carry transit traffic: each is split into a source vertex
(out-links only) and a sink vertex (in-links only), so one Dijkstra per source finds every path, and no path can
pass through a third endpoint.

Endpoints whose out-links are alike (same far ends, bandwidths and latencies, in the same order: every CPU process
of a host, GPUs under one PCIe switch) have alike searches: from each, the search reaches the same inner vertices
at the same distances in the same order, and sinks, which lead nowhere, change nothing. So one search per class
gives every member's paths, with the member's own first link in place of the representative's. A host of 4,000
ranks costs one search, not 4,000 (nor 16 million stored pairs).
"""
from __future__ import annotations

import heapq

import numpy as np

from .model import HardwareError, NodeTemplate


def shortest_paths(g: dict, source) -> dict:
    """Dijkstra from source over g (vertex -> {next: (index, weight)}): vertex -> path, ties broken as networkx's
    single_source_dijkstra_path breaks them (first found, neighbours in insertion order), so routes do not move.
    Written here because importing networkx for it cost every simcomm process 75 ms at start."""
    dist: dict = {}
    seen = {source: 0.0}
    paths = {source: [source]}
    heap = [(0.0, 0, source)]
    counter = 1
    while heap:
        d, _, v = heapq.heappop(heap)
        if v in dist:
            continue
        dist[v] = d
        for u, (_, cost) in g[v].items():
            vu = d + cost
            if u in dist:
                continue
            if u not in seen or vu < seen[u]:
                seen[u] = vu
                heapq.heappush(heap, (vu, counter, u))
                counter += 1
                paths[u] = paths[v] + [u]
    return paths


class Csr:
    """Rows of link ids laid end to end: row r is links[starts[r]:starts[r] + lengths[r]]."""

    def __init__(self, rows: list[tuple[int, ...]]):
        self.lengths = np.array([len(r) for r in rows], dtype=np.int64)
        self.starts = np.cumsum(self.lengths) - self.lengths
        self.links = np.array([j for r in rows for j in r], dtype=np.int64)

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, links) of `rows`, their links laid end to end in order."""
        return gather(self.lengths, self.starts, self.links, rows)


def gather(lengths: np.ndarray, starts: np.ndarray, links: np.ndarray, rows: np.ndarray):
    """(lengths, links) of CSR rows `rows` (repeats kept), laid end to end."""
    counts = lengths[rows]
    offsets = np.repeat(starts[rows] - (np.cumsum(counts) - counts), counts)
    return counts, links[np.arange(int(counts.sum())) + offsets]


class TemplatePaths:
    """A node template's paths as link-index tables (template link indices)."""

    def __init__(self, t: NodeTemplate):
        self.template = t
        eps = t.endpoints
        self._out = {e: ("out", e) for e in eps}
        self._sink = {e: ("in", e) for e in eps}
        widths = sorted({link.bandwidth for link in t.links}, reverse=True)
        self._graphs = []
        for width in widths:
            g: dict = {}  # vertex -> {next vertex: (link index, weight)}, in insertion order
            for j, link in enumerate(t.links):
                if link.bandwidth >= width:
                    # A tiny per-hop term breaks latency ties in favour of fewer hops.
                    u, v = self._out.get(link.src, link.src), self._sink.get(link.dst, link.dst)
                    g.setdefault(u, {})[v] = (j, link.latency + 1e-12)
                    g.setdefault(v, {})
            self._graphs.append(g)
        out_links: list[list[int]] = [[] for _ in eps]
        index = {e: i for i, e in enumerate(eps)}
        for j, link in enumerate(t.links):
            if link.src in index:
                out_links[index[link.src]].append(j)
        width = max((len(x) for x in out_links), default=0)
        self.out_links = np.full((len(eps), max(width, 1)), -1, dtype=np.int64)
        for i, x in enumerate(out_links):
            self.out_links[i, :len(x)] = x
        signatures: dict[tuple, int] = {}
        self.klass = np.empty(len(eps), dtype=np.int64)
        self.reps: list[int] = []
        for i, x in enumerate(out_links):
            sig = tuple((t.links[j].dst, t.links[j].bandwidth, t.links[j].latency) for j in x)
            if sig not in signatures:
                signatures[sig] = len(self.reps)
                self.reps.append(i)
            self.klass[i] = signatures[sig]
        self._build_tables()

    # ---- searches ------------------------------------------------------------------------------------------
    def _search(self, source) -> list[dict]:
        return [shortest_paths(g, source) if source in g else {} for g in self._graphs]

    def _path(self, reach: list[dict], source, target, a: str, b: str) -> tuple[int, ...]:
        for g, found in zip(self._graphs, reach):
            if target in found:
                vertices = found[target]
                return tuple(g[u][v][0] for u, v in zip(vertices, vertices[1:]))
        raise HardwareError(f"{self.template.name}: no path from {a} to {b} inside a node")

    def _build_tables(self) -> None:
        """Per class and endpoint (and per class and NIC): the position of the first link among the source's
        out-links and the rest of the path; per endpoint, the path from its NIC.

        A member's path to its own representative is the representative's path to its own sink (the search from
        the member reaches the representative's sink exactly as the representative's reaches its own)."""
        t = self.template
        eps, classes = t.endpoints, len(self.reps)
        first = np.zeros((classes, len(eps)), dtype=np.int64)
        tails: list[tuple[int, ...]] = []
        nic_first = np.zeros((classes, max(len(t.nics), 1)), dtype=np.int64)
        nic_tails: list[tuple[int, ...]] = []
        for c, rep in enumerate(self.reps):
            a = eps[rep]
            reach = self._search(self._out[a])
            position = {int(j): k for k, j in enumerate(self.out_links[rep]) if j >= 0}
            alone = int((self.klass == c).sum()) == 1
            for i, b in enumerate(eps):
                if i == rep and alone:  # nobody needs a path to this endpoint's own sink
                    tails.append(())
                    continue
                path = self._path(reach, self._out[a], self._sink[b], a, b)
                first[c, i] = position[path[0]]
                tails.append(path[1:])
            uses = {t.endpoint_nic[i] for i in np.flatnonzero(self.klass == c).tolist()} if t.nics else set()
            for x, nic in enumerate(t.nics):
                if x not in uses:
                    nic_tails.append(())
                    continue
                path = self._path(reach, self._out[a], nic, a, nic)
                nic_first[c, x] = position[path[0]]
                nic_tails.append(path[1:])
        self._first, self._tails = first, Csr(tails)
        self._nic_first, self._nic_tails = nic_first, Csr(nic_tails)
        from_nic = []
        searched: dict = {}
        for i, e in enumerate(eps):
            if t.nics:
                nic = t.nics[t.endpoint_nic[i]]
                if nic not in searched:
                    searched[nic] = self._search(nic)
                from_nic.append(self._path(searched[nic], nic, self._sink[e], nic, e))
            else:
                from_nic.append(())
        self._from_nic = Csr(from_nic)

    # ---- tables --------------------------------------------------------------------------------------------
    def local(self, i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, links) of the paths from local rank i[k] to local rank j[k] (i != j), end to end."""
        c = self.klass[i]
        lengths, tails = self._tails.take(c * len(self.template.endpoints) + j)
        return _prepend(self.out_links[i, self._first[c, j]], lengths, tails)

    def to_nic(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, links) of the paths from local rank i[k] to its NIC."""
        c = self.klass[i]
        nic = np.asarray(self.template.endpoint_nic, dtype=np.int64)[i]
        pos = self._nic_first[c, nic]
        lengths, tails = self._nic_tails.take(c * len(self.template.nics) + nic)
        return _prepend(self.out_links[i, pos], lengths, tails)

    def from_nic(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, links) of the paths from local rank i[k]'s NIC to it."""
        return self._from_nic.take(i)


def _prepend(first: np.ndarray, lengths: np.ndarray, tails: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows `first[k]` + tail k (tails laid end to end by `lengths`)."""
    total = lengths + 1
    out = np.empty(int(total.sum()), dtype=np.int64)
    heads = np.cumsum(total) - total
    out[heads] = first
    mask = np.ones(len(out), dtype=bool)
    mask[heads] = False
    out[mask] = tails
    return total, out
