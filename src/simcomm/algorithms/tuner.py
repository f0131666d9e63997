"""Picks algorithm and protocol by predicted time, the way NCCL's model does (src/graph/tuning.cc).

time = latency + bytes / algorithm bandwidth, with the cluster's own figures as inputs: the per-GPU intra-node
link (NCCL's bwIntra), the NIC ports and rails a node's group ranks use (bwInter), and the route latencies plus
the protocol's per-hop latency. Figures are from /work/shared/reference/collective-cost-models.md.

NCCL's algorithms follow NCCL's formulas:
- ring: base + (nsteps - nInterSteps) * intraLat + nInterSteps * interLat; algbw = busBw * n / nsteps.
- tree (all_reduce): base + 2 * ((ppn - 1) * intraLat + log2i(nNodes) * interLat); busBw x 0.92, algbw = busBw/2.
- nvls: NVLS latency (25 us) once; busBw = bwIntra * 0.85 * (nCh-1)/nCh, x2 for all_reduce; Simple only.
- protocols: LL moves half its wire bytes (capped by NCCL's llMaxBw), LL128 0.92, Simple 1.
- busBw across nodes is min(bwIntra, the node's NIC ports in use): NCCL reads bwIntra for <= 2 nodes and
  bwInter beyond, from its topology search; here the cluster's NICs bound it either way.
- reductions cost nothing extra where the device fuses them into the transfer (NCCL); gloo-style CPU ranks
  reduce after receiving, so the busiest rank's reduced bytes x 3 / memory bandwidth is added.
The other algorithms (recursive doubling, halving-doubling, Bruck, direct, pairwise, hierarchical, binomial)
get alpha-beta step models: per step, the protocol hop latency plus the route latency (inter-node when any rank of
the step leaves its node) and the step's bytes over the slowest share (NVLink per GPU, or the NIC ports shared by
the node's ranks that cross at once).

choose() chooses like NCCL: among NCCL's own algorithms for the collective (ring/tree/NVLS for all_reduce, ...;
gloo's ring for all_reduce on CPU ranks). Every registered algorithm can be forced by name (NCCL_ALGO-style);
algorithms that cannot run on the group (NVLS off an NVLS node or across nodes, hierarchical on partial nodes)
are excluded, and forcing them is an AlgorithmError that says why.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import AlgorithmError
from .plan import Collective
from .protocols import PROTOCOLS
from .protocols import protocol as make_protocol

# What NCCL itself would pick from, per collective (choose() considers only these unless one is forced).
NCCL_MENU = {
    "all_reduce": ("ring", "tree", "nvls"), "all_gather": ("ring", "nvls"), "reduce_scatter": ("ring", "nvls"),
    "broadcast": ("ring",), "reduce": ("ring",), "all_to_all": ("direct",), "gather": ("direct",),
    "scatter": ("direct",), "sendrecv": ("direct",), "barrier": ("dissemination",),
}
GLOO_MENU = {"all_reduce": ("ring",)}  # torch's ProcessGroupGloo all_reduce: gloo's ring
# NCCL tuning.cc llMaxBws (GB/s) by architecture, for 1 node / 2 nodes / more.
LL_MAX_BW = {"hopper": (141.0, 45.0, 35.0), "ampere": (87.7, 22.5, 19.0), "other": (39.0, 39.0, 20.4)}
NVLS_CHANNELS = 16  # NCCL's default NVLS channel count on Hopper
NVLS_EFFICIENCY = 0.85  # tuning.cc, Hopper
TREE_EFFICIENCY = 0.92  # tuning.cc: tree all_reduce busBw
_FAMILY = {"tree": "tree", "nvls": "nvls"}


# ---- the group and the cluster's figures --------------------------------------------------------------
class _Shape:
    """Everything the models need about a group on a cluster."""

    def __init__(self, cluster, coll: Collective):
        rpn = cluster.ranks_per_node
        ranks = np.asarray(coll.ranks)
        node_of = ranks // rpn
        nodes, counts = np.unique(node_of, return_counts=True)
        self.n = len(ranks)
        self.nodes = len(nodes)
        self.ppn = int(counts.max())
        self.rpn = rpn
        t = cluster.template
        self.intra_bw, self.intra_lat, self.intra_kind = cluster.intra_node
        if self.intra_bw <= 0:  # one rank per node: everything goes over the network
            self.intra_bw, self.intra_kind = math.inf, "net"
        if cluster.num_nodes > 1:
            self.path_bw, self.inter_lat = cluster.inter_node
            local = ranks[node_of == nodes[0]] % rpn
            used = len({t.endpoint_nic[int(x)] for x in local}) if t.nics else 1
            port = t.nic_bandwidth or self.path_bw
            self.node_net = used * port  # what one node's NIC ports can push out at once
            # each rank's share when all of a node's group ranks cross at once
            self.rank_net = min(self.path_bw, used * port / max(1, len(local)))
        else:
            self.path_bw = self.inter_lat = self.node_net = self.rank_net = 0.0


def _ll_max(cluster, nodes: int) -> float:
    name = cluster.device.name.upper()
    arch = "hopper" if ("H100" in name or "H200" in name or "H800" in name) else \
        ("ampere" if "A100" in name or "A800" in name else "other")
    return LL_MAX_BW[arch][0 if nodes <= 1 else (1 if nodes == 2 else 2)] * 1e9


def why_not(cluster, coll: Collective, algorithm: str) -> str | None:
    """Why `algorithm` cannot run `coll` on `cluster` (None when it can)."""
    if algorithm == "nvls":
        from .nvls import why_not as nvls_why
        if cluster.device.kind != "gpu":
            return f"nvls needs GPUs on NVSwitch; {cluster.name} has {cluster.device.kind} ranks"
        return nvls_why(cluster, coll.ranks)
    if algorithm == "hierarchical":
        from .hierarchical import why_not as hier_why
        return hier_why(np.asarray(coll.ranks), cluster.ranks_per_node)
    return None


# ---- models -------------------------------------------------------------------------------------------
def predict(cluster, coll: Collective, algorithm: str, proto_name: str) -> float:
    """NCCL-style predicted seconds for coll with algorithm and protocol on cluster (inf if unsupported)."""
    n = coll.n
    if n == 1:
        return 0.0
    cpu = cluster.device.kind == "cpu"
    if algorithm == "nvls" and proto_name != "Simple" and not cpu:
        return math.inf  # NCCL has no LL/LL128 NVLS
    g = _Shape(cluster, coll)
    proto = make_protocol(proto_name, _FAMILY.get(algorithm, "ring"), cluster.device.kind)
    intra_lat = proto.hop(g.intra_kind) + g.intra_lat
    inter_lat = proto.hop("net") + g.inter_lat
    eff = proto.efficiency
    ll = proto.name == "LL"
    llmax = _ll_max(cluster, g.nodes)

    def proto_bw(bus: float) -> float:
        bw = bus * eff
        return min(bw, llmax) if ll else bw

    return _network_time(cluster, coll, algorithm, g, proto, intra_lat, inter_lat, proto_bw) + \
        _reduction_time(cluster, coll, algorithm, g)


def _reduction_time(cluster, coll: Collective, algorithm: str, g: _Shape) -> float:
    """Reductions that do not overlap the transfers (gloo on CPUs reduces after receiving): the busiest rank's
    reduced bytes, read twice and written once at memory speed. NCCL fuses them into the copy: nothing."""
    kind = coll.kind
    if cluster.device.fused_reduction or kind not in ("all_reduce", "reduce_scatter", "reduce") or \
            algorithm == "nvls":
        return 0.0
    n, size = g.n, float(coll.nbytes)
    p = 1 << (n.bit_length() - 1)
    folded = size if p != n else 0.0
    if algorithm == "recursive_doubling":
        reduced = folded + math.log2(p) * size
    elif algorithm == "halving_doubling":
        reduced = folded + (p - 1) / p * size
    elif algorithm == "hierarchical":
        reduced = (g.ppn - 1) / g.ppn * size + (g.nodes - 1) / g.nodes * size / g.ppn
    elif algorithm == "binomial":
        reduced = _log2(n) * size
    elif algorithm == "tree":
        return 0.0  # pipelined with the slices: counted with the transfers
    elif kind == "reduce":
        reduced = size
    else:  # ring and direct reduce-scatter shapes
        reduced = (n - 1) / n * size
    return 3 * reduced / cluster.device.memory_bandwidth


def _network_time(cluster, coll: Collective, algorithm: str, g: _Shape, proto, intra_lat: float, inter_lat: float,
                  proto_bw) -> float:
    n, kind, size = g.n, coll.kind, float(coll.nbytes)
    if algorithm == "ring" and kind in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        nsteps = {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1}.get(kind, n)
        inter = 0 if g.nodes <= 1 else (2 * (g.nodes - 1) if kind == "all_reduce" else g.nodes - 1)
        lat = proto.base_latency + (nsteps - inter) * intra_lat + inter * inter_lat
        bus = g.intra_bw if g.nodes <= 1 else min(g.intra_bw, g.node_net)
        if kind in ("broadcast", "reduce"):
            return lat + size / proto_bw(bus)
        return lat + size * nsteps / n / proto_bw(bus)
    if algorithm == "tree" and kind == "all_reduce":
        ppn = g.ppn
        depth = int(math.floor(math.log2(g.nodes))) if g.nodes > 1 else 0
        lat = proto.base_latency + 2 * ((ppn - 1) * intra_lat + depth * inter_lat)
        bus = (g.intra_bw if g.nodes <= 1 else min(g.intra_bw, g.node_net)) * TREE_EFFICIENCY
        t = size / (proto_bw(bus) * 0.5)
        if not cluster.device.fused_reduction:  # gloo-style reductions, pipelined with the slices
            t = max(t, 3 * size / cluster.device.memory_bandwidth)
        return lat + t
    if algorithm == "nvls":
        up = cluster.switch_links(int(coll.ranks[0]))[0] if cluster.template.nvls else None
        lat = proto.hop(g.intra_kind) + (float(cluster.link_latency[up]) if up is not None else g.intra_lat)
        bus = g.intra_bw * NVLS_EFFICIENCY * (NVLS_CHANNELS - 1) / NVLS_CHANNELS
        if kind == "all_reduce":
            return lat + size * 2 * (n - 1) / n / (2 * bus)
        return lat + size * (n - 1) / n / bus
    return proto.base_latency + _step_model(g, coll, algorithm, intra_lat, inter_lat, proto_bw,
                                            cluster.device.fused_reduction, cluster.device.memory_bandwidth)


def _shift_cross(g: _Shape, d: int) -> int:
    """Ranks per node whose partner r + d (node-major numbering) sits on another node."""
    if g.nodes <= 1 or d % g.n == 0:
        return 0
    return min(g.ppn, d)


def _xor_cross(g: _Shape, m: int) -> int:
    """Ranks per node whose partner r ^ m sits on another node."""
    if g.nodes <= 1:
        return 0
    if m >= g.ppn:
        return g.ppn
    return 0 if g.ppn % (2 * m) == 0 else m


def _one_step(g: _Shape, nbytes: float, cross: int, intra_lat: float, inter_lat: float, proto_bw) -> float:
    """A step where every rank sends nbytes; `cross` ranks per node send to another node."""
    if nbytes <= 0:
        return inter_lat if cross else intra_lat
    t_intra = nbytes / proto_bw(g.intra_bw) if cross < g.ppn else 0.0
    if not cross:
        return intra_lat + t_intra
    share = min(g.path_bw, g.node_net / cross)
    return inter_lat + max(t_intra, nbytes / proto_bw(share))


def _log2(n: int) -> int:
    return int(math.ceil(math.log2(n))) if n > 1 else 0


def _step_model(g: _Shape, coll: Collective, algorithm: str, intra_lat, inter_lat, proto_bw, fused: bool = True,
                mem_bw: float = math.inf) -> float:
    """Alpha-beta models, step by step, for everything outside NCCL's own formulas."""
    n, kind = g.n, coll.kind
    isz = coll.itemsize
    blk = coll.count * isz
    size = float(coll.nbytes)
    step = lambda b, cross: _one_step(g, b, cross, intra_lat, inter_lat, proto_bw)  # noqa: E731
    p = 1 << (n.bit_length() - 1)
    rem = n - p
    fold = (2 * step(size if kind == "all_reduce" else blk, _shift_cross(g, 1))) if rem else 0.0
    if algorithm == "recursive_doubling" and kind == "all_reduce":
        return fold + sum(step(size, _xor_cross(g, 1 << k)) for k in range(_log2(p)))
    if algorithm == "recursive_doubling" and kind == "all_gather":
        share = blk * n / p
        return fold + sum(step(share * (1 << k), _xor_cross(g, 1 << k)) for k in range(_log2(p)))
    if algorithm == "halving_doubling" and kind == "all_reduce":
        halves = [step(size / (2 << k), _xor_cross(g, 1 << k)) for k in range(_log2(p))]
        return fold + 2 * sum(halves)
    if algorithm == "halving_doubling" and kind == "reduce_scatter":
        fold = (step(size, _shift_cross(g, 1)) + step(blk, _shift_cross(g, 1))) if rem else 0.0
        return fold + sum(step(size / (2 << k), _xor_cross(g, 1 << k)) for k in range(_log2(p)))
    copy = 2 * n * blk / mem_bw  # one local rotation of a rank's whole buffer (read + write)
    if algorithm == "bruck" and kind == "all_gather":
        return copy + sum(step(min(1 << k, n - (1 << k)) * blk, _shift_cross(g, 1 << k)) for k in range(_log2(n)))
    if algorithm == "bruck" and kind == "all_to_all":
        pos = np.arange(n)
        return 2 * copy + sum(step(float(((pos >> k) & 1).sum()) * blk, _shift_cross(g, 1 << k))
                              for k in range(_log2(n)))
    if algorithm == "direct" and kind in ("all_gather", "reduce_scatter"):
        out_intra, out_inter = (g.ppn - 1) * blk, (n - g.ppn) * blk
        t = out_intra / proto_bw(g.intra_bw) if g.ppn > 1 else 0.0
        if out_inter:
            return inter_lat + max(t, out_inter / proto_bw(g.rank_net))
        return intra_lat + t
    if algorithm == "direct" and kind == "all_to_all":
        return sum(step(blk, _shift_cross(g, s)) for s in range(1, n))
    if algorithm == "direct" and kind in ("gather", "scatter"):
        t = (g.ppn - 1) * blk / proto_bw(g.intra_bw) if g.ppn > 1 else 0.0
        if n > g.ppn:
            return inter_lat + max(t, (n - g.ppn) * blk / proto_bw(min(g.path_bw, g.node_net)))
        return intra_lat + t
    if algorithm == "direct" and kind == "sendrecv":
        return step(blk, _shift_cross(g, 1))
    if algorithm == "dissemination":
        return sum(step(0.0, _shift_cross(g, 1 << k)) for k in range(_log2(n)))
    if algorithm == "hierarchical":
        ll, nn = g.ppn, g.nodes
        chunk = size / ll
        t = 2 * (ll - 1) * step(chunk, 0) if ll > 1 else 0.0
        if nn > 1:
            lat_bw = inter_lat + chunk / nn / proto_bw(g.rank_net)
            t += 2 * (nn - 1) * lat_bw
        return t
    if algorithm == "binomial" and kind in ("broadcast", "reduce"):
        # step k: ranks < 2^k (from the root) send to rank + 2^k; it leaves the node once 2^k >= ppn
        return sum(step(size, g.ppn if (1 << k) >= g.ppn and g.nodes > 1 else 0) for k in range(_log2(n)))
    if algorithm == "tree" and kind in ("broadcast", "reduce"):
        # NCCL's binary tree over the ranks from the root, pipelined: the worst root-leaf path's hop latencies,
        # and the busiest rank's children (each gets the whole message) over its links.
        from .tree import rooted_tree_parent
        parent = rooted_tree_parent(coll)
        node = np.asarray(coll.ranks) // g.rpn
        v = np.flatnonzero(parent >= 0)
        cross = node[v] != node[parent[v]]
        path = np.zeros(n)
        hop = np.where(cross, inter_lat, intra_lat)
        while True:  # relax level by level (the depth is about log2 n)
            nxt = path.copy()
            nxt[v] = path[parent[v]] + hop
            if np.array_equal(nxt, path):
                break
            path = nxt
        fan_intra = np.bincount(parent[v][~cross], minlength=n).max() if (~cross).any() else 0
        fan_cross = np.bincount(parent[v][cross], minlength=n).max() if cross.any() else 0
        t = max(fan_intra * size / proto_bw(g.intra_bw) if fan_intra else 0.0,
                fan_cross * size / proto_bw(min(g.intra_bw, g.path_bw)) if fan_cross else 0.0)
        red = 0.0 if fused or kind == "broadcast" else 3 * 2 * size / mem_bw  # overlaps the next slice
        return float(path.max()) + max(t, red)
    # Anything else (an algorithm registered later, or a ring plan for another kind): n-1 neighbour steps,
    # each moving the per-rank share, which is what a ring-shaped schedule costs.
    share = size / n if kind in ("all_reduce", "broadcast", "reduce", "sendrecv") else blk
    steps = 2 * (n - 1) if kind == "all_reduce" else n - 1
    return steps * step(share, _shift_cross(g, 1))


# ---- the choice ---------------------------------------------------------------------------------------
def candidates(cluster, coll: Collective, available) -> list[str]:
    """Algorithms choose() weighs when none is forced: NCCL's (or gloo's) menu, minus what cannot run here."""
    menu = (GLOO_MENU if cluster.device.kind == "cpu" else {}).get(coll.kind) or NCCL_MENU.get(coll.kind, ())
    usable = [a for a in sorted(available) if why_not(cluster, coll, a) is None]
    preferred = [a for a in usable if a in menu]
    return preferred or usable


def choose(cluster, coll: Collective, algorithm: str | None = None, protocol: str | None = None):
    """The (algorithm, protocol) with the least predicted time, honouring any forced choice."""
    from .registry import ALGORITHMS, Choice
    available = ALGORITHMS.get(coll.kind)
    if available is None:
        raise AlgorithmError(f"unknown collective {coll.kind!r}")
    if algorithm is not None and algorithm not in available:
        raise AlgorithmError(f"algorithm {algorithm!r} is not available for {coll.kind}; "
                             f"expected one of {', '.join(sorted(available)) or '(none)'}")
    if protocol is not None and protocol not in PROTOCOLS:
        raise AlgorithmError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    if algorithm is not None:
        reason = why_not(cluster, coll, algorithm)
        if reason:
            raise AlgorithmError(f"algorithm {algorithm!r} cannot run this {coll.kind}: {reason}")
        algos = [algorithm]
    else:
        algos = candidates(cluster, coll, available)
        if not algos:
            raise AlgorithmError(f"no algorithm can run this {coll.kind} on {cluster.name}")
    cpu = cluster.device.kind == "cpu"
    protos = [protocol or "Simple"] if cpu else ([protocol] if protocol else list(PROTOCOLS))
    best = None
    for a in algos:
        for p in protos:
            t = predict(cluster, coll, a, p)
            if math.isfinite(t) and (best is None or t < best.predicted):
                best = Choice(a, p, t)
    if best is None:
        raise AlgorithmError(f"algorithm {algos[0]!r} does not support protocol {protos[0]!r}"
                             + ("; nvls runs only with Simple" if algos == ["nvls"] else ""))
    return best
