"""A cluster: N copies of a node template joined by a fabric, with deterministic routing between ranks.

Links are numbered so the engine can keep per-link state in numpy arrays:
node k's template link j is `k * L + j`; NIC i of node k has an uplink `P + 2*(k*nics + i)` and a downlink one
above it; fabric link j is `F + j`. Routes are computed hierarchically (inside the node from the template, across
the fabric by breadth-first search between switches), so a 16,384-GPU cluster never needs all-pairs paths.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .model import Fabric, HardwareError, NodeTemplate


_M64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a fixed, well-spread hash, so ECMP choices do not collide on regular patterns."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


@dataclass(frozen=True)
class _SwitchGraph:
    """The fabric's switches as arrays: switch i's out-links are link[ptr[i]:ptr[i+1]] to nbr[...]; the
    switches with a link into i are rsrc[rptr[i]:rptr[i+1]]."""

    index: dict
    ptr: np.ndarray
    nbr: np.ndarray
    link: np.ndarray
    rptr: np.ndarray
    rsrc: np.ndarray


def _shortest_paths(g: dict, source) -> dict:
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


def _template_paths(t: NodeTemplate) -> tuple[dict, dict, dict]:
    """Local paths as tuples of template link indices: the widest path (highest bottleneck bandwidth, as NCCL's
    topology search prefers NVLink over PCIe), then the lowest latency, then the fewest hops.

    Returns (endpoint->endpoint, endpoint->its NIC, its NIC->endpoint). Endpoints never carry transit traffic:
    each endpoint is split into a source vertex (out-links only) and a sink vertex (in-links only), so one
    Dijkstra per source finds every path, and no path can pass through a third endpoint.
    """
    endpoints = set(t.endpoints)
    out = {e: ("out", e) for e in endpoints}
    sink = {e: ("in", e) for e in endpoints}
    widths = sorted({link.bandwidth for link in t.links}, reverse=True)
    graphs = []
    for width in widths:
        g: dict = {}  # vertex -> {next vertex: (link index, weight)}, in insertion order
        for j, link in enumerate(t.links):
            if link.bandwidth >= width:
                # A tiny per-hop term breaks latency ties in favour of fewer hops.
                u, v = out.get(link.src, link.src), sink.get(link.dst, link.dst)
                g.setdefault(u, {})[v] = (j, link.latency + 1e-12)
                g.setdefault(v, {})
        graphs.append(g)
    found: dict[object, dict] = {}

    def paths_from(a) -> list[dict]:
        if a not in found:
            found[a] = [_shortest_paths(g, a) if a in g else {} for g in graphs]
        return found[a]

    def path(a: str, b: str) -> tuple[int, ...]:
        src, dst = out.get(a, a), sink.get(b, b)
        for g, reach in zip(graphs, paths_from(src)):
            if dst in reach:
                vertices = reach[dst]
                return tuple(g[u][v][0] for u, v in zip(vertices, vertices[1:]))
        raise HardwareError(f"{t.name}: no path from {a} to {b} inside a node")

    pairs = {(i, j): path(a, b) for i, a in enumerate(t.endpoints) for j, b in enumerate(t.endpoints) if i != j}
    to_nic, from_nic = {}, {}
    for i, e in enumerate(t.endpoints):
        if t.nics:
            nic = t.nics[t.endpoint_nic[i]]
            to_nic[i], from_nic[i] = path(e, nic), path(nic, e)
    return pairs, to_nic, from_nic


class Cluster:
    """N nodes of one template and the fabric between them; ranks are numbered node-major."""

    def __init__(self, name: str, template: NodeTemplate, num_nodes: int, fabric: Fabric | None = None):
        if num_nodes < 1:
            raise HardwareError(f"{name}: a cluster needs at least one node, got {num_nodes}")
        if num_nodes > 1 and (fabric is None or not template.nics):
            raise HardwareError(f"{name}: {num_nodes} nodes need NICs on the node and a fabric between them")
        self.name = name
        self.template = template
        self.num_nodes = num_nodes
        self.fabric = fabric if num_nodes > 1 else None
        self.ranks_per_node = len(template.endpoints)
        self.num_ranks = num_nodes * self.ranks_per_node
        self.device = template.device
        self._local_paths, self._to_nic, self._from_nic = _template_paths(template)

        per_node = len(template.links)
        nics = len(template.nics) if self.fabric else 0
        self._port_base = num_nodes * per_node
        self._fabric_base = self._port_base + 2 * num_nodes * nics
        fabric_links = self.fabric.links if self.fabric else ()
        caps = [link.bandwidth for link in template.links] * num_nodes
        lats = [link.latency for link in template.links] * num_nodes
        kinds = [link.kind for link in template.links] * num_nodes
        caps += [template.nic_bandwidth] * (2 * num_nodes * nics)
        lats += [template.nic_latency] * (2 * num_nodes * nics)
        kinds += ["net"] * (2 * num_nodes * nics)
        caps += [link.bandwidth for link in fabric_links]
        lats += [link.latency for link in fabric_links]
        kinds += [link.kind for link in fabric_links]
        self.link_capacity = np.asarray(caps, dtype=np.float64)
        self.link_latency = np.asarray(lats, dtype=np.float64)
        self.link_kind = tuple(kinds)
        self.num_links = len(caps)

        self._adjacency: dict[str, list[tuple[str, int]]] = {}
        if self.fabric:
            known = set(self.fabric.switches)
            for j, link in enumerate(fabric_links):
                if link.src not in known or link.dst not in known:
                    raise HardwareError(f"{name}: fabric link {link.src}->{link.dst} names an unknown switch")
                self._adjacency.setdefault(link.src, []).append((link.dst, self._fabric_base + j))
            for nbrs in self._adjacency.values():
                nbrs.sort()
        self._distances: dict[str, dict[str, int]] = {}
        self._next_hops: dict[tuple[str, str], list[tuple[str, int]]] = {}
        self._route_of: dict[tuple[int, int], int] = {}
        self.route_links: list[np.ndarray] = []
        self._csr = None  # route_links as one array (rebuilt when routes are added)
        self._sorted_keys = np.empty(0, dtype=np.int64)  # src * num_ranks + dst of routed pairs, sorted
        self._sorted_rids = np.empty(0, dtype=np.int64)
        self.route_latency: list[float] = []

    # ---- ranks -------------------------------------------------------------------------------------------
    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def local_rank(self, rank: int) -> int:
        return rank % self.ranks_per_node

    def check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.num_ranks:
            raise HardwareError(f"rank {rank} is out of range: {self.name} has ranks 0 to {self.num_ranks - 1}")

    # ---- routing -----------------------------------------------------------------------------------------
    def route_id(self, src: int, dst: int) -> int:
        """Interned id of the route from rank src to rank dst (see route_links / route_latency)."""
        key = (src, dst)
        rid = self._route_of.get(key)
        if rid is None:
            links = np.asarray(self._compute_route(src, dst), dtype=np.int64)
            rid = len(self.route_links)
            self.route_links.append(links)
            self.route_latency.append(float(self.link_latency[links].sum()) if len(links) else 0.0)
            self._route_of[key] = rid
        return rid

    def route_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lengths, starts, links) of every route so far: route r is links[starts[r]:starts[r] + lengths[r]]."""
        known = 0 if self._csr is None else len(self._csr[0])
        if known != len(self.route_links):  # routes added since: append theirs (rebuilding is quadratic)
            new = self.route_links[known:]
            lengths = np.fromiter((len(x) for x in new), dtype=np.int64, count=len(new))
            links = np.concatenate(new).astype(np.int64) if lengths.sum() else np.empty(0, np.int64)
            if known:
                old_lengths, _, old_links = self._csr
                lengths, links = np.concatenate([old_lengths, lengths]), np.concatenate([old_links, links])
            self._csr = (lengths, np.cumsum(lengths) - lengths, links)
        return self._csr

    def links_crossed(self, routes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(link ids, per route its link count): the links each of `routes` crosses, laid end to end in order
        (repeats kept), so that np.repeat(x, counts) lines a per-route x up with them."""
        lengths, starts, links = self.route_csr()
        counts = lengths[routes]
        offsets = np.repeat(starts[routes] - (np.cumsum(counts) - counts), counts)
        return links[np.arange(int(counts.sum())) + offsets], counts

    def route_ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Route ids for arrays of source and destination ranks (a sorted-key lookup; new pairs are routed)."""
        keys = np.asarray(src, dtype=np.int64) * self.num_ranks + np.asarray(dst, dtype=np.int64)
        out = np.empty(len(keys), dtype=np.int64)
        hit = np.zeros(len(keys), dtype=bool)
        if len(self._sorted_keys):
            pos = np.minimum(np.searchsorted(self._sorted_keys, keys), len(self._sorted_keys) - 1)
            hit = self._sorted_keys[pos] == keys
            out[hit] = self._sorted_rids[pos[hit]]
        if not hit.all():
            new = np.unique(keys[~hit])
            rids = np.fromiter((self.route_id(int(k) // self.num_ranks, int(k) % self.num_ranks) for k in new),
                               dtype=np.int64, count=len(new))
            all_keys = np.concatenate([self._sorted_keys, new])
            order = np.argsort(all_keys, kind="stable")
            self._sorted_keys = all_keys[order]
            self._sorted_rids = np.concatenate([self._sorted_rids, rids])[order]
            out[~hit] = rids[np.searchsorted(new, keys[~hit])]
        return out

    def route(self, src: int, dst: int) -> np.ndarray:
        """Link ids crossed going from rank src to rank dst, in order."""
        return self.route_links[self.route_id(src, dst)]

    def path_route(self, links: tuple[int, ...]) -> int:
        """Interned id of an explicit path of link ids (e.g. GPU -> NVSwitch only, for in-switch reduction).

        Shares the id space of `route_id` (see route_links / route_latency), with its own cache.
        """
        key = tuple(int(j) for j in links)
        cache = self.__dict__.setdefault("_path_of", {})
        rid = cache.get(key)
        if rid is None:
            bad = [j for j in key if not 0 <= j < self.num_links]
            if bad:
                raise HardwareError(f"{self.name}: link id(s) {bad} out of range 0..{self.num_links - 1}")
            arr = np.asarray(key, dtype=np.int64)
            rid = len(self.route_links)
            self.route_links.append(arr)
            self.route_latency.append(float(self.link_latency[arr].sum()) if len(arr) else 0.0)
            cache[key] = rid
        return rid

    def switch_links(self, rank: int) -> tuple[int, int]:
        """(GPU -> NVSwitch, NVSwitch -> GPU) link ids of `rank` on a node with an NVSwitch."""
        self.check_rank(rank)
        node, local = divmod(rank, self.ranks_per_node)
        t = self.template
        e = t.endpoints[local]
        up = next((j for j, lk in enumerate(t.links) if lk.src == e and t.vertices.get(lk.dst) == "nvswitch"), None)
        down = next((j for j, lk in enumerate(t.links) if lk.dst == e and t.vertices.get(lk.src) == "nvswitch"),
                    None)
        if up is None or down is None:
            raise HardwareError(f"{self.name}: {self.rank_name(rank)} has no NVSwitch link")
        base = node * len(t.links)
        return base + up, base + down

    def _compute_route(self, src: int, dst: int) -> list[int]:
        self.check_rank(src)
        self.check_rank(dst)
        if src == dst:
            return []
        per_node = len(self.template.links)
        sn, sl = divmod(src, self.ranks_per_node)
        dn, dl = divmod(dst, self.ranks_per_node)
        if sn == dn:
            return [sn * per_node + j for j in self._local_paths[(sl, dl)]]
        t = self.template
        s_nic, d_nic = t.endpoint_nic[sl], t.endpoint_nic[dl]
        nics = len(t.nics)
        up = self._port_base + 2 * (sn * nics + s_nic)
        down = self._port_base + 2 * (dn * nics + d_nic) + 1
        a, b = self.fabric.attach(sn, s_nic), self.fabric.attach(dn, d_nic)
        middle = self._fabric_path(a, b, salt=src * 1_000_003 + dst)
        return ([sn * per_node + j for j in self._to_nic[sl]] + [up] + middle + [down]
                + [dn * per_node + j for j in self._from_nic[dl]])

    def _fabric_path(self, a: str, b: str, salt: int) -> list[int]:
        """Fewest-hop switch path; among equal choices a fixed hash of the flow picks one (ECMP)."""
        if a == b:
            return []
        g = self._switch_graph
        ai, bi = g.index[a], g.index[b]
        dist = self._distances.get(bi)
        if dist is None:
            dist = self._distances[bi] = self._bfs_to(bi)
        if dist[ai] < 0:
            raise HardwareError(f"{self.name}: no fabric path from switch {a} to switch {b}")
        path, here, hop = [], ai, 0
        while here != bi:
            nxt = self._next_hops.get((here, bi))
            if nxt is None:  # cached: a spine has one neighbour per leaf, so scanning per route is costly
                lo, hi = g.ptr[here], g.ptr[here + 1]
                closer = dist[g.nbr[lo:hi]] == dist[here] - 1
                nxt = self._next_hops[(here, bi)] = (g.nbr[lo:hi][closer].tolist(), g.link[lo:hi][closer].tolist())
            k = _mix(salt * 64 + hop) % len(nxt[0])
            path.append(nxt[1][k])
            here, hop = nxt[0][k], hop + 1
        return path

    @cached_property
    def _switch_graph(self) -> _SwitchGraph:
        # Built once, as arrays: per-target searches and next-hop scans over 10^3 switches stay in numpy.
        names = sorted(set(self._adjacency) | {v for nbrs in self._adjacency.values() for v, _ in nbrs})
        index = {name: i for i, name in enumerate(names)}
        nbrs = [self._adjacency.get(name, []) for name in names]  # each sorted by (neighbour, link)
        ptr = np.cumsum([0] + [len(x) for x in nbrs])
        nbr = np.array([index[v] for x in nbrs for v, _ in x], dtype=np.int64)
        link = np.array([j for x in nbrs for _, j in x], dtype=np.int64)
        src = np.repeat(np.arange(len(names)), np.diff(ptr))
        order = np.argsort(nbr, kind="stable")  # edges by head: who reaches each switch in one hop
        rptr = np.searchsorted(nbr[order], np.arange(len(names) + 1))
        return _SwitchGraph(index, ptr, nbr, link, rptr, src[order])

    def _bfs_to(self, target: int) -> np.ndarray:
        """Hops from every switch to switch `target` (-1: no path), breadth first over reversed links."""
        g = self._switch_graph
        dist = np.full(len(g.index), -1, dtype=np.int64)
        dist[target] = 0
        frontier, level = np.array([target]), 0
        while len(frontier):
            level += 1
            lo, size = g.rptr[frontier], g.rptr[frontier + 1] - g.rptr[frontier]
            gather = np.repeat(lo - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))  # the ranges, joined
            reach = g.rsrc[gather]
            reach = np.unique(reach[dist[reach] < 0])
            dist[reach] = level
            frontier = reach
        return dist

    # ---- names and summaries -----------------------------------------------------------------------------
    def link_name(self, link: int) -> str:
        per_node = len(self.template.links)
        if link < self._port_base:
            node, j = divmod(link, per_node)
            spec = self.template.links[j]
            return f"n{node}.{spec.src}->n{node}.{spec.dst}"
        if link < self._fabric_base:
            port, direction = divmod(link - self._port_base, 2)
            node, nic = divmod(port, len(self.template.nics))
            sw = self.fabric.attach(node, nic)
            name = f"n{node}.{self.template.nics[nic]}"
            return f"{name}->{sw}" if direction == 0 else f"{sw}->{name}"
        spec = self.fabric.links[link - self._fabric_base]
        return f"{spec.src}->{spec.dst}"

    def rank_name(self, rank: int) -> str:
        return f"n{self.node_of(rank)}.{self.template.endpoints[self.local_rank(rank)]}"

    def bottleneck(self, src: int, dst: int) -> tuple[float, float]:
        """(bandwidth, latency) of the uncontended route from src to dst."""
        rid = self.route_id(src, dst)
        links = self.route_links[rid]
        return float(self.link_capacity[links].min()), self.route_latency[rid]

    @cached_property
    def intra_node(self) -> tuple[float, float, str]:
        """(bandwidth, latency, link kind) between local ranks 0 and 1: NVLink, PCIe or loopback."""
        if self.ranks_per_node < 2:
            return 0.0, 0.0, "none"
        bw, lat = self.bottleneck(0, 1)
        kinds = {self.link_kind[j] for j in self.route(0, 1)}
        kind = "nvlink" if "nvlink" in kinds else ("pcie" if "pcie" in kinds else sorted(kinds)[0])
        return bw, lat, kind

    @cached_property
    def inter_node(self) -> tuple[float, float]:
        """(bandwidth, latency) of the route from rank 0 to the first rank of the last node."""
        if self.num_nodes < 2:
            return 0.0, 0.0
        return self.bottleneck(0, (self.num_nodes - 1) * self.ranks_per_node)

    @cached_property
    def graph(self):
        """The whole cluster as a networkx DiGraph (built on first use; large clusters make large graphs)."""
        import networkx as nx
        g = nx.DiGraph()
        t = self.template
        for k in range(self.num_nodes):
            for v, kind in t.vertices.items():
                g.add_node(f"n{k}.{v}", kind=kind, node=k)
            for spec in t.links:
                g.add_edge(f"n{k}.{spec.src}", f"n{k}.{spec.dst}", bandwidth=spec.bandwidth,
                           latency=spec.latency, kind=spec.kind)
        if self.fabric:
            for s in self.fabric.switches:
                g.add_node(s, kind="switch", node=-1)
            for spec in self.fabric.links:
                g.add_edge(spec.src, spec.dst, bandwidth=spec.bandwidth, latency=spec.latency, kind=spec.kind)
            for k in range(self.num_nodes):
                for i, nic in enumerate(t.nics):
                    sw = self.fabric.attach(k, i)
                    for a, b in ((f"n{k}.{nic}", sw), (sw, f"n{k}.{nic}")):
                        g.add_edge(a, b, bandwidth=t.nic_bandwidth, latency=t.nic_latency, kind="net")
        return g

    def describe(self) -> dict:
        """A summary fit for `simcomm presets` and reports."""
        d = self.device
        intra_bw, intra_lat, intra_kind = self.intra_node
        inter_bw, inter_lat = self.inter_node
        return {
            "name": self.name, "template": self.template.name, "description": self.template.description,
            "nodes": self.num_nodes, "ranks_per_node": self.ranks_per_node, "ranks": self.num_ranks,
            "device": d.name, "device_kind": d.kind, "memory_bandwidth": d.memory_bandwidth,
            "memory_capacity": d.memory_capacity, "compute_rate": d.compute_rate,
            "intra_node": {"kind": intra_kind, "bandwidth": intra_bw, "latency": intra_lat},
            "inter_node": {"bandwidth": inter_bw, "latency": inter_lat,
                           "fabric": self.fabric.kind if self.fabric else "none",
                           "nics_per_node": len(self.template.nics)},
            "nvls": self.template.nvls, "links": self.num_links, "sources": list(self.template.sources),
        }
