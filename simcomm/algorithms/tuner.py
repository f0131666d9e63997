"""Picks algorithm and protocol by predicted time, the way NCCL's model does (src/graph/tuning.cc).

time = base latency + steps * per-step latency + bytes / algorithm bandwidth, with the cluster's own link figures
as the bandwidth inputs. Users can force either choice (NCCL_ALGO / NCCL_PROTO).
"""
from __future__ import annotations

import math

from ..errors import AlgorithmError
from .plan import Collective
from .protocols import PROTOCOLS
from .protocols import protocol as make_protocol


def _link_class(cluster) -> str:
    return cluster.intra_node[2] if cluster.ranks_per_node > 1 else "net"


def _group_shape(cluster, coll: Collective) -> tuple[int, int]:
    """(nodes spanned, ranks per node) of the group."""
    nodes = len(set((coll.ranks // cluster.ranks_per_node).tolist()))
    return nodes, max(1, coll.n // nodes)


def _bandwidths(cluster, nodes: int) -> tuple[float, float]:
    intra = cluster.intra_node[0] or cluster.inter_node[0]
    inter = cluster.inter_node[0] * len(cluster.template.nics) / max(cluster.ranks_per_node, 1) \
        if cluster.num_nodes > 1 else intra
    return intra, inter


def predict(cluster, coll: Collective, algorithm: str, proto_name: str) -> float:
    """NCCL-style predicted seconds for coll with algorithm and protocol on cluster."""
    n = coll.n
    if n == 1:
        return 0.0
    nodes, ppn = _group_shape(cluster, coll)
    family = "tree" if algorithm == "tree" else ("nvls" if algorithm == "nvls" else "ring")
    proto = make_protocol(proto_name, family, cluster.device.kind)
    intra_bw, inter_bw = _bandwidths(cluster, nodes)
    intra_lat = proto.hop(_link_class(cluster)) + cluster.intra_node[1]
    inter_lat = proto.hop("net") + cluster.inter_node[1]
    bw = (intra_bw if nodes <= 1 else min(intra_bw, inter_bw)) * proto.efficiency
    size = coll.nbytes
    kind = coll.kind
    steps = {"all_reduce": 2 * (n - 1), "all_gather": n - 1, "reduce_scatter": n - 1, "broadcast": n - 1,
             "reduce": n - 1, "all_to_all": n - 1, "gather": 1, "scatter": 1, "barrier": math.ceil(math.log2(n)),
             "sendrecv": 1}[kind]
    factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
              "all_to_all": (n - 1) / n}.get(kind, 1.0)
    inter_steps = 0 if nodes <= 1 else (2 * (nodes - 1) if kind == "all_reduce" else nodes - 1)
    if algorithm == "tree":
        depth = math.ceil(math.log2(max(nodes, 1))) if nodes > 1 else 0
        lat = proto.base_latency + 2 * ((ppn - 1) * intra_lat + depth * inter_lat)
        if kind != "all_reduce":
            lat = proto.base_latency + math.ceil(math.log2(n)) * (inter_lat if nodes > 1 else intra_lat)
            return lat + size / bw
        return lat + size / (bw * 0.92 * 0.5)  # tree all-reduce: busbw 0.92x, algbw = busbw / 2
    if algorithm == "nvls":
        lat = proto.base_latency + 2 * intra_lat
        nvls_bw = intra_bw * 0.85 * (2 if kind == "all_reduce" else 1)
        return lat + size * factor / nvls_bw
    lat = proto.base_latency + (steps - inter_steps) * intra_lat + inter_steps * inter_lat
    if algorithm in ("recursive_doubling", "halving_doubling", "bruck", "dissemination"):
        lat = proto.base_latency + math.ceil(math.log2(n)) * (2 if kind == "all_reduce" else 1) * \
            (inter_lat if nodes > 1 else intra_lat)
    if algorithm == "direct" and kind in ("all_gather", "reduce_scatter", "gather", "scatter"):
        lat = proto.base_latency + (inter_lat if nodes > 1 else intra_lat)
    return lat + size * factor / bw


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
    algos = [algorithm] if algorithm else sorted(available)
    if not cluster.template.nvls:
        algos = [a for a in algos if a != "nvls"] or algos
    protos = [protocol] if protocol else list(PROTOCOLS)
    if cluster.device.kind == "cpu":
        protos = [protocol or "Simple"]
    best = None
    for a in algos:
        for p in protos:
            t = predict(cluster, coll, a, p)
            if best is None or t < best.predicted:
                best = Choice(a, p, t)
    return best
