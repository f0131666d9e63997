"""Routes as arrays: the interned route table, and paths across the fabric between switches.

A route is interned once (an id) and kept in one CSR table (lengths, starts, links) with its latency, never as a
Python object per route: a 131,072-GPU tree touches a million pairs. Route ids are looked up by sorted keys
(src * ranks + dst), new pairs are routed in bulk.

Across the fabric a route takes the fewest switch hops; among equal choices a fixed hash of the flow picks one
(ECMP). A two-tier leaf-spine fabric (every leaf joined once to every spine, the shape the builders make) is routed
by its symmetry: leaf -> the hashed spine -> leaf, in numpy for any number of pairs. Any other fabric is searched
breadth first, switch by switch (a route per pair).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..arrays import unique
from .model import Fabric, HardwareError

_M64 = (1 << 64) - 1
_GOLDEN, _MUL1, _MUL2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
SALT = 1_000_003  # a flow's hash: src * SALT + dst


def mix(x: int) -> int:
    """splitmix64's finaliser: a fixed, well-spread hash, so ECMP choices do not collide on regular patterns."""
    x = (x + _GOLDEN) & _M64
    x = ((x ^ (x >> 30)) * _MUL1) & _M64
    x = ((x ^ (x >> 27)) * _MUL2) & _M64
    return x ^ (x >> 31)


def mix_array(x: np.ndarray) -> np.ndarray:
    """mix() over an array of non-negative integers below 2**64 (uint64 arithmetic wraps as & _M64 does)."""
    x = np.asarray(x, dtype=np.uint64) + np.uint64(_GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(_MUL1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(_MUL2)
    return x ^ (x >> np.uint64(31))


def ends_to_csr(pieces: list[tuple[np.ndarray, np.ndarray]], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Join per-row pieces into rows: pieces[p] = (lengths per row, links end to end); row r is piece 0's part of
    r, then piece 1's, ... Returns (lengths, links)."""
    lengths = np.zeros(rows, dtype=np.int64)
    for part, _ in pieces:
        lengths += part
    out = np.empty(int(lengths.sum()), dtype=np.int64)
    at = np.cumsum(lengths) - lengths  # where each row's next piece goes
    for part, links in pieces:
        if len(links):
            offsets = np.repeat(at - (np.cumsum(part) - part), part)
            out[np.arange(len(links)) + offsets] = links
        at = at + part
    return lengths, out


class RouteTable:
    """Interned routes: ids 0, 1, ... with their links (CSR) and latencies; pair keys -> ids."""

    def __init__(self, link_latency: np.ndarray):
        self._link_latency = link_latency
        self.count = 0
        self._lengths = np.empty(1024, dtype=np.int64)
        self._starts = np.empty(1024, dtype=np.int64)
        self._latency = np.empty(1024)
        self._links = np.empty(8192, dtype=np.int64)
        self._used = 0
        # pair keys -> route ids: a large sorted level and a small one (merged into the large one as it grows)
        self._keys = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]
        self._rids = [np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)]

    # ---- routes --------------------------------------------------------------------------------------------
    def add(self, lengths: np.ndarray, links: np.ndarray) -> np.ndarray:
        """Intern the routes given as (lengths, links end to end); returns their ids."""
        k, total = len(lengths), int(lengths.sum())
        self._lengths = _fit(self._lengths, self.count + k)
        self._starts = _fit(self._starts, self.count + k)
        self._latency = _fit(self._latency, self.count + k)
        self._links = _fit(self._links, self._used + total)
        ids = np.arange(self.count, self.count + k)
        self._lengths[ids] = lengths
        self._starts[ids] = self._used + np.cumsum(lengths) - lengths
        self._links[self._used:self._used + total] = links
        self._latency[ids] = _sums(self._link_latency[links], lengths)
        self.count += k
        self._used += total
        return ids

    def csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self._lengths[:self.count], self._starts[:self.count], self._links[:self._used]

    @property
    def latency(self) -> np.ndarray:
        return self._latency[:self.count]

    def links(self, rid: int) -> np.ndarray:
        start = self._starts[rid]
        return self._links[start:start + self._lengths[rid]]

    # ---- pair keys -----------------------------------------------------------------------------------------
    def find(self, keys: np.ndarray) -> np.ndarray:
        """Route id of every key (-1 where unknown)."""
        out = np.full(len(keys), -1, dtype=np.int64)
        for known, rids in zip(self._keys, self._rids):
            if len(known):
                pos = np.minimum(np.searchsorted(known, keys), len(known) - 1)
                hit = known[pos] == keys
                out[hit] = rids[pos[hit]]
        return out

    def remember(self, keys: np.ndarray, rids: np.ndarray) -> None:
        """Index new (distinct, unknown) keys."""
        small_keys = np.concatenate([self._keys[1], keys])
        small_rids = np.concatenate([self._rids[1], rids])
        order = np.argsort(small_keys, kind="stable")
        self._keys[1], self._rids[1] = small_keys[order], small_rids[order]
        if len(self._keys[1]) > max(4096, len(self._keys[0]) // 4):  # merge: amortised linear
            both = np.concatenate(self._keys)
            order = np.argsort(both, kind="stable")
            self._keys = [both[order], np.empty(0, dtype=np.int64)]
            self._rids = [np.concatenate(self._rids)[order], np.empty(0, dtype=np.int64)]


def _fit(buf: np.ndarray, size: int) -> np.ndarray:
    if size <= len(buf):
        return buf
    grown = np.empty(max(size, 2 * len(buf)), dtype=buf.dtype)
    grown[:len(buf)] = buf
    return grown


def _sums(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row, the sum of its values as numpy sums a 1-D array of that length (the same bits as
    link_latency[route].sum()): rows of one length are summed together along their axis."""
    out = np.zeros(len(lengths))
    if not len(lengths):
        return out
    starts = np.cumsum(lengths) - lengths
    for size in unique(lengths).tolist():
        if size == 0:
            continue
        rows = np.flatnonzero(lengths == size)
        out[rows] = values[starts[rows][:, None] + np.arange(size)[None, :]].sum(axis=1)
    return out


@dataclass(frozen=True)
class _SwitchGraph:
    """The fabric's switches as arrays: switch i's out-links are link[ptr[i]:ptr[i+1]] to nbr[...] (ordered by
    neighbour name, then link); the switches with a link into i are rsrc[rptr[i]:rptr[i+1]]."""

    index: dict
    ptr: np.ndarray
    nbr: np.ndarray
    link: np.ndarray
    rptr: np.ndarray
    rsrc: np.ndarray


class FabricPaths:
    """Switch-to-switch paths of one cluster's fabric, as cluster link ids (fabric link j is `base + j`)."""

    def __init__(self, fabric: Fabric, num_nodes: int, nics: int, base: int, cluster_name: str):
        self.fabric, self.num_nodes, self.nics, self.base, self.name = fabric, num_nodes, nics, base, cluster_name
        self._distances: dict[int, np.ndarray] = {}
        self._next_hops: dict[tuple[int, int], tuple[list[int], list[int]]] = {}

    @cached_property
    def graph(self) -> _SwitchGraph:
        known = set(self.fabric.switches)
        src, dst = [], []
        for link in self.fabric.links:
            if link.src not in known or link.dst not in known:
                raise HardwareError(f"{self.name}: fabric link {link.src}->{link.dst} names an unknown switch")
            src.append(link.src)
            dst.append(link.dst)
        attached = set(self.attach_names)
        if not attached <= known:
            raise HardwareError(f"{self.name}: NICs plug into unknown switch(es) {', '.join(sorted(attached - known))}")
        names = sorted(set(src) | set(dst) | attached)
        index = {name: i for i, name in enumerate(names)}
        s = np.array([index[v] for v in src], dtype=np.int64)
        d = np.array([index[v] for v in dst], dtype=np.int64)
        j = np.arange(len(s), dtype=np.int64) + self.base
        # out-links ordered by (source, neighbour name, link): names are numbered in sorted order
        order = np.lexsort((j, d, s))
        s, d, j = s[order], d[order], j[order]
        ptr = np.searchsorted(s, np.arange(len(names) + 1))
        back = np.argsort(d, kind="stable")  # edges by head: who reaches each switch in one hop
        rptr = np.searchsorted(d[back], np.arange(len(names) + 1))
        return _SwitchGraph(index, ptr, d, j, rptr, s[back])

    @cached_property
    def attach_names(self) -> list[str]:
        """The switch each (node, NIC) plugs into, node-major."""
        attach = self.fabric.attach
        return [attach(k, x) for k in range(self.num_nodes) for x in range(self.nics)]

    @cached_property
    def attach(self) -> np.ndarray:
        """Switch index of each (node, NIC), shape (nodes, nics)."""
        index = self.graph.index
        return np.array([index[v] for v in self.attach_names], dtype=np.int64).reshape(self.num_nodes, self.nics)

    # ---- leaf-spine by symmetry -----------------------------------------------------------------------------
    @cached_property
    def clos(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """For a two-tier leaf-spine (leaves: the switches NICs plug into; spines: the others; every leaf joined
        once to every spine in each direction, nothing else): (leaf position per switch (-1: a spine),
        up[leaf, k]: the link from the leaf to its k-th spine in neighbour order, spine[leaf, k]: that spine's
        position, down[spine, leaf]: the link back). None for any other shape."""
        g = self.graph
        n = len(g.index)
        leaves = np.zeros(n, dtype=bool)
        leaves[self.attach.reshape(-1)] = True
        nl, ns = int(leaves.sum()), n - int(leaves.sum())
        if not ns or len(g.nbr) != 2 * nl * ns:
            return None
        src = np.repeat(np.arange(n), np.diff(g.ptr))
        degree = np.diff(g.ptr)
        if (leaves[src] == leaves[g.nbr]).any() or (degree[leaves] != ns).any() or (degree[~leaves] != nl).any():
            return None
        if len(unique(src * n + g.nbr)) != len(src):
            return None
        position = np.full(n, -1, dtype=np.int64)
        position[leaves] = np.arange(nl)
        position[~leaves] = np.arange(ns)
        rows = g.ptr[np.flatnonzero(leaves)][:, None] + np.arange(ns)[None, :]
        up, spine = g.link[rows], position[g.nbr[rows]]
        down = np.full((ns, nl), -1, dtype=np.int64)
        back = ~leaves[src]
        down[position[src[back]], position[g.nbr[back]]] = g.link[back]
        return np.where(leaves, position, -1), up, spine, down

    def middle(self, a: np.ndarray, b: np.ndarray, salt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, links) of the fabric paths from switch a[k] to switch b[k] (indices; equal: none), the flow
        hashed by salt[k]."""
        same = a == b
        clos = self.clos
        if clos is not None:
            leaf, up, spine, down = clos
            lengths = np.where(same, 0, 2).astype(np.int64)
            go = np.flatnonzero(~same)
            k = (mix_array(salt[go].astype(np.uint64) * np.uint64(64)) % np.uint64(up.shape[1])).astype(np.int64)
            la, lb = leaf[a[go]], leaf[b[go]]
            links = np.stack([up[la, k], down[spine[la, k], lb]], axis=1)
            return lengths, links.reshape(-1)
        paths = [self.path(int(x), int(y), int(s)) if x != y else [] for x, y, s in zip(a, b, salt)]
        lengths = np.array([len(p) for p in paths], dtype=np.int64)
        return lengths, np.array([j for p in paths for j in p], dtype=np.int64)

    # ---- any fabric, breadth first --------------------------------------------------------------------------
    def path(self, ai: int, bi: int, salt: int) -> list[int]:
        """Fewest-hop switch path; among equal choices a fixed hash of the flow picks one (ECMP)."""
        g = self.graph
        dist = self._distances.get(bi)
        if dist is None:
            dist = self._distances[bi] = self._bfs_to(bi)
        if dist[ai] < 0:
            names = sorted(g.index, key=g.index.get)
            raise HardwareError(f"{self.name}: no fabric path from switch {names[ai]} to switch {names[bi]}")
        path, here, hop = [], ai, 0
        while here != bi:
            nxt = self._next_hops.get((here, bi))
            if nxt is None:  # cached: a spine has one neighbour per leaf, so scanning per route is costly
                lo, hi = g.ptr[here], g.ptr[here + 1]
                closer = dist[g.nbr[lo:hi]] == dist[here] - 1
                nxt = self._next_hops[(here, bi)] = (g.nbr[lo:hi][closer].tolist(), g.link[lo:hi][closer].tolist())
            k = mix(salt * 64 + hop) % len(nxt[0])
            path.append(nxt[1][k])
            here, hop = nxt[0][k], hop + 1
        return path

    def _bfs_to(self, target: int) -> np.ndarray:
        """Hops from every switch to switch `target` (-1: no path), breadth first over reversed links."""
        g = self.graph
        dist = np.full(len(g.index), -1, dtype=np.int64)
        dist[target] = 0
        frontier, level = np.array([target]), 0
        while len(frontier):
            level += 1
            lo, size = g.rptr[frontier], g.rptr[frontier + 1] - g.rptr[frontier]
            gather = np.repeat(lo - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))  # the ranges, joined
            reach = g.rsrc[gather]
            reach = unique(reach[dist[reach] < 0])
            dist[reach] = level
            frontier = reach
        return dist
