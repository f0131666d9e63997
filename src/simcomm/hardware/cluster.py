"""A cluster: N copies of a node template joined by a fabric, with deterministic routing between ranks.

Links are numbered so the engine can keep per-link state in numpy arrays:
node k's template link j is `k * L + j`; NIC i of node k has an uplink `P + 2*(k*nics + i)` and a downlink one
above it; fabric link j is `F + j`. Routes are computed hierarchically and in bulk (inside the node from the
template's path tables, paths.py; across the fabric by its symmetry or breadth first, routes.py), so a 131,072-GPU
cluster never needs all-pairs paths, and building one costs what its links do.
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from ..arrays import unique
from .model import Fabric, HardwareError, NodeTemplate
from .paths import TemplatePaths, gather
from .routes import SALT, FabricPaths, RouteTable, ends_to_csr


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
        self._paths = TemplatePaths(template)

        per_node = len(template.links)
        nics = len(template.nics) if self.fabric else 0
        self._port_base = num_nodes * per_node
        self._fabric_base = self._port_base + 2 * num_nodes * nics
        fabric_links = self.fabric.links if self.fabric else ()
        ports = 2 * num_nodes * nics
        self.link_capacity = np.concatenate([
            np.tile(np.array([link.bandwidth for link in template.links], dtype=np.float64), num_nodes),
            np.full(ports, float(template.nic_bandwidth)),
            np.array([link.bandwidth for link in fabric_links], dtype=np.float64)])
        self.link_latency = np.concatenate([
            np.tile(np.array([link.latency for link in template.links], dtype=np.float64), num_nodes),
            np.full(ports, float(template.nic_latency)),
            np.array([link.latency for link in fabric_links], dtype=np.float64)])
        self.link_kind = (tuple(link.kind for link in template.links) * num_nodes + ("net",) * ports
                          + tuple(link.kind for link in fabric_links))
        self.num_links = len(self.link_capacity)
        self._fabric_paths = FabricPaths(self.fabric, num_nodes, nics, self._fabric_base, name) if self.fabric \
            else None
        self._routes = RouteTable(self.link_latency)
        self._path_of: dict[tuple[int, ...], int] = {}
        self._single = np.full(self.num_links, -1, dtype=np.int64)  # route id of each one-link path

    # ---- ranks -------------------------------------------------------------------------------------------
    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def local_rank(self, rank: int) -> int:
        return rank % self.ranks_per_node

    def check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.num_ranks:
            raise HardwareError(f"rank {rank} is out of range: {self.name} has ranks 0 to {self.num_ranks - 1}")

    # ---- routing -----------------------------------------------------------------------------------------
    @property
    def route_links(self) -> "RouteLinks":
        """Route id -> the link ids it crosses, in order (a read-only sequence)."""
        return RouteLinks(self._routes)

    @property
    def route_latency(self) -> np.ndarray:
        """Route id -> the sum of its links' latencies."""
        return self._routes.latency

    def route_id(self, src: int, dst: int) -> int:
        """Interned id of the route from rank src to rank dst (see route_links / route_latency)."""
        return int(self.route_ids(np.array([src]), np.array([dst]))[0])

    def route_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lengths, starts, links) of every route so far: route r is links[starts[r]:starts[r] + lengths[r]]."""
        return self._routes.csr()

    def links_crossed(self, routes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(link ids, per route its link count): the links each of `routes` crosses, laid end to end in order
        (repeats kept), so that np.repeat(x, counts) lines a per-route x up with them."""
        lengths, starts, links = self._routes.csr()
        counts, crossed = gather(lengths, starts, links, np.asarray(routes, dtype=np.int64))
        return crossed, counts

    def route_ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Route ids for arrays of source and destination ranks (a sorted-key lookup; new pairs are routed)."""
        src = np.asarray(src, dtype=np.int64).reshape(-1)
        dst = np.asarray(dst, dtype=np.int64).reshape(-1)
        keys = src * self.num_ranks + dst
        out = self._routes.find(keys)
        miss = out < 0
        if miss.any():
            for ranks in (src[miss], dst[miss]):
                bad = (ranks < 0) | (ranks >= self.num_ranks)
                if bad.any():
                    self.check_rank(int(ranks[bad][0]))
            new = unique(keys[miss])
            rids = self._routes.add(*self._compute_routes(new // self.num_ranks, new % self.num_ranks))
            self._routes.remember(new, rids)
            out[miss] = rids[np.searchsorted(new, keys[miss])]
        return out

    def route(self, src: int, dst: int) -> np.ndarray:
        """Link ids crossed going from rank src to rank dst, in order."""
        return self._routes.links(self.route_id(src, dst))

    def path_route(self, links: tuple[int, ...]) -> int:
        """Interned id of an explicit path of link ids (e.g. GPU -> NVSwitch only, for in-switch reduction).

        Shares the id space of `route_id` (see route_links / route_latency), with its own cache.
        """
        key = tuple(int(j) for j in links)
        if len(key) == 1:
            return int(self.link_routes(np.array(key))[0])
        rid = self._path_of.get(key)
        if rid is None:
            bad = [j for j in key if not 0 <= j < self.num_links]
            if bad:
                raise HardwareError(f"{self.name}: link id(s) {bad} out of range 0..{self.num_links - 1}")
            rid = self._path_of[key] = int(self._routes.add(np.array([len(key)]), np.array(key, dtype=np.int64))[0])
        return rid

    def link_routes(self, links: np.ndarray) -> np.ndarray:
        """Interned route ids of the one-link paths `links` (as path_route((link,)) for each)."""
        links = np.asarray(links, dtype=np.int64).reshape(-1)
        bad = (links < 0) | (links >= self.num_links)
        if bad.any():
            raise HardwareError(f"{self.name}: link id(s) {links[bad][:8].tolist()} out of range "
                                f"0..{self.num_links - 1}")
        new = unique(links[self._single[links] < 0])
        if len(new):
            self._single[new] = self._routes.add(np.ones(len(new), dtype=np.int64), new)
        return self._single[links]

    def switch_links(self, rank: int) -> tuple[int, int]:
        """(GPU -> NVSwitch, NVSwitch -> GPU) link ids of `rank` on a node with an NVSwitch."""
        self.check_rank(rank)
        node, local = divmod(rank, self.ranks_per_node)
        up, down = self._switch_ports[local]
        if up < 0 or down < 0:
            raise HardwareError(f"{self.name}: {self.rank_name(rank)} has no NVSwitch link")
        base = node * len(self.template.links)
        return base + up, base + down

    def switch_ports(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """switch_links for an array of ranks: (up links, down links)."""
        ranks = np.asarray(ranks, dtype=np.int64)
        node, local = np.divmod(ranks, self.ranks_per_node)
        ports = self._switch_ports[local]
        if (ports < 0).any():
            self.switch_links(int(ranks[(ports < 0).any(axis=1)][0]))  # raises, naming the rank
        base = node * len(self.template.links)
        return base + ports[:, 0], base + ports[:, 1]

    @cached_property
    def _switch_ports(self) -> np.ndarray:
        """(local rank, up/down) template link index to and from the NVSwitch (-1: none)."""
        t = self.template
        out = np.full((self.ranks_per_node, 2), -1, dtype=np.int64)
        for local, e in enumerate(t.endpoints):
            up = next((j for j, lk in enumerate(t.links) if lk.src == e and t.vertices.get(lk.dst) == "nvswitch"),
                      None)
            down = next((j for j, lk in enumerate(t.links) if lk.dst == e and t.vertices.get(lk.src) == "nvswitch"),
                        None)
            out[local] = (-1 if up is None else up, -1 if down is None else down)
        return out

    def _compute_routes(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, links end to end) of the routes src[k] -> dst[k], in bulk."""
        rpn, per_node = self.ranks_per_node, len(self.template.links)
        sn, sl = np.divmod(src, rpn)
        dn, dl = np.divmod(dst, rpn)
        lengths = np.zeros(len(src), dtype=np.int64)
        inside = np.flatnonzero((sn == dn) & (sl != dl))
        across = np.flatnonzero(sn != dn)
        parts = []  # (row indices, lengths, links)
        if len(inside):
            n, links = self._paths.local(sl[inside], dl[inside])
            parts.append((inside, n, links + np.repeat(sn[inside] * per_node, n)))
        if len(across):
            parts.append((across, *self._across(src[across], dst[across])))
        for idx, n, _ in parts:
            lengths[idx] = n
        out = np.empty(int(lengths.sum()), dtype=np.int64)
        starts = np.cumsum(lengths) - lengths
        for idx, n, links in parts:
            out[np.repeat(starts[idx] - (np.cumsum(n) - n), n) + np.arange(len(links))] = links
        return lengths, out

    def _across(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, links) of routes between nodes: to the NIC, its port up, the fabric, the port down, from the
        NIC."""
        t = self.template
        rpn, per_node, nics = self.ranks_per_node, len(t.links), len(t.nics)
        sn, sl = np.divmod(src, rpn)
        dn, dl = np.divmod(dst, rpn)
        nic_of = np.asarray(t.endpoint_nic, dtype=np.int64)
        s_nic, d_nic = nic_of[sl], nic_of[dl]
        fab = self._fabric_paths
        attach = fab.attach
        to_n, to_links = self._paths.to_nic(sl)
        from_n, from_links = self._paths.from_nic(dl)
        one = np.ones(len(src), dtype=np.int64)
        mid_n, mid_links = fab.middle(attach[sn, s_nic], attach[dn, d_nic], src * SALT + dst)
        return ends_to_csr([
            (to_n, to_links + np.repeat(sn * per_node, to_n)),
            (one, self._port_base + 2 * (sn * nics + s_nic)),
            (mid_n, mid_links),
            (one, self._port_base + 2 * (dn * nics + d_nic) + 1),
            (from_n, from_links + np.repeat(dn * per_node, from_n))], len(src))

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
        links = self._routes.links(rid)
        return float(self.link_capacity[links].min()), float(self._routes.latency[rid])

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
    def neighbour_latency(self) -> float:
        """The mean route latency from each local rank to the next (wrapping round): what a hop of a chain or ring
        inside a node costs where some neighbours sit further apart (under different PCIe switches)."""
        rpn = self.ranks_per_node
        if rpn < 2:
            return 0.0
        local = np.arange(rpn)
        rids = self.route_ids(local, (local + 1) % rpn)
        return float(np.mean(self.route_latency[rids]))

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


class RouteLinks:
    """A read-only sequence view of a cluster's interned routes: route id -> its link ids."""

    def __init__(self, table: RouteTable):
        self._table = table

    def __len__(self) -> int:
        return self._table.count

    def __getitem__(self, rid: int) -> np.ndarray:
        if not -self._table.count <= rid < self._table.count:
            raise IndexError(f"route id {rid} out of range")
        return self._table.links(rid % self._table.count)
