"""What an algorithm's cost prediction needs to know about a group on a cluster, and the alpha-beta step model.

Figures are the cluster's own: the per-GPU intra-node link (NCCL's bwIntra), the NIC ports and rails a node's group
ranks use (bwInter), route latencies plus the protocol's per-hop latency. See tuner.py for how they are combined.
"""
from __future__ import annotations

import math

import numpy as np

from .plan import Collective, group_shape
from .protocols import Protocol


def log2_ceil(n: int) -> int:
    return int(math.ceil(math.log2(n))) if n > 1 else 0


class CostModel:
    """A collective's group on a cluster under one protocol: bandwidths, latencies and the step model."""

    def __init__(self, cluster, coll: Collective, proto: Protocol):
        self.cluster = cluster
        self.coll = coll
        self.proto = proto
        rpn = cluster.ranks_per_node
        shape = group_shape(cluster, coll.ranks)
        self.n = coll.n
        self.nodes = shape.nodes
        self.ppn = shape.ppn
        self.rpn = rpn
        t = cluster.template
        self.intra_bw, intra_lat, self.intra_kind = cluster.intra_node
        if rpn > 2:  # neighbours in a chain or ring may sit further apart (PCIe switches): their mean route latency
            intra_lat = cluster.neighbour_latency
        if self.intra_bw <= 0:  # one rank per node: everything goes over the network
            self.intra_bw, self.intra_kind = math.inf, "net"
        if cluster.num_nodes > 1:
            self.path_bw, inter_lat = cluster.inter_node
            local = shape.first_local
            used = len(set(np.asarray(t.endpoint_nic)[local].tolist())) if t.nics else 1
            port = t.nic_bandwidth or self.path_bw
            self.node_net = used * port  # what one node's NIC ports can push out at once
            # each rank's share when all of a node's group ranks cross at once
            self.rank_net = min(self.path_bw, used * port / max(1, len(local)))
            # the NIC each of a node's group ranks leaves through (its position in the node's group), and one
            # NIC port's rate: for algorithms where only some ranks cross (a tree's channel heads)
            self.local_nic = np.asarray(t.endpoint_nic)[local] if t.nics else np.arange(len(local))
            self.nic_rate = min(self.path_bw, port)
        else:
            self.path_bw = inter_lat = self.node_net = self.rank_net = self.nic_rate = 0.0
            self.local_nic = np.zeros(0, dtype=np.int64)
        self.intra_lat = proto.hop(self.intra_kind) + intra_lat  # one step inside a node
        self.inter_lat = proto.hop("net") + inter_lat  # one step across nodes
        self.fused = cluster.device.fused_reduction
        self.mem_bw = cluster.device.memory_bandwidth

    def proto_bw(self, bus: float) -> float:
        """The bandwidth the protocol gets out of `bus` bytes/s of links: its efficiency (the cluster's tuning
        included), the figure the simulation's wire factor divides by."""
        return bus * self.proto.efficiency

    def capped(self, t, payload):
        """A step's transfer time `t` as the executor times it under the protocol's rate cap (LL's llMaxBw): no
        less than the busiest rank's `payload` bytes at the cap (scalars or arrays alike)."""
        return np.maximum(t, payload / self.proto.max_rate)

    def cap_scale(self, t, payload):
        """How much the cap stretches a step of transfer time `t` (>= 1): the executor scales every flow of the
        step alike, so a step's parts (a hop inside a node, one across) stretch by this same factor."""
        t = np.asarray(t, dtype=float)
        return np.where(t > 0, self.capped(t, payload) / np.where(t > 0, t, 1.0), 1.0)

    # ---- the alpha-beta step model -----------------------------------------------------------------------
    def shift_cross(self, d: int) -> int:
        """Ranks per node whose partner r + d (node-major numbering) sits on another node."""
        if self.nodes <= 1 or d % self.n == 0:
            return 0
        return min(self.ppn, d)

    def xor_cross(self, m: int) -> int:
        """Ranks per node whose partner r ^ m sits on another node."""
        if self.nodes <= 1:
            return 0
        if m >= self.ppn:
            return self.ppn
        return 0 if self.ppn % (2 * m) == 0 else m

    def step(self, nbytes: float, cross: int) -> float:
        """A step where every rank sends nbytes; `cross` ranks per node send to another node."""
        if nbytes <= 0:
            return self.inter_lat if cross else self.intra_lat
        t_intra = nbytes / self.proto_bw(self.intra_bw) if cross < self.ppn else 0.0
        if not cross:
            return self.intra_lat + float(self.capped(t_intra, nbytes))
        share = min(self.path_bw, self.node_net / cross)
        return self.inter_lat + float(self.capped(max(t_intra, nbytes / self.proto_bw(share)), nbytes))

    def fold(self, nbytes: float) -> float:
        """Folding a non-power-of-two group onto the largest power of two below it, and unfolding: two steps."""
        p = 1 << (self.n.bit_length() - 1)
        return 2 * self.step(nbytes, self.shift_cross(1)) if self.n != p else 0.0

    def local_copy(self, nbytes: float) -> float:
        """A local copy of nbytes (read + write) at memory speed."""
        return 2 * nbytes / self.mem_bw


def pipelined_end(stage_times: np.ndarray, hop_costs: np.ndarray, slices: int) -> float:
    """When a pipelined plan ends: its lockstep stages back to back, or the last slice's latency chain if later.

    The last slice crosses hop h at stage slices - 1 + h, no earlier than that stage starts, and arrives its cost
    (transfer plus latency) later; it waits at a hop only when the stage starts after it arrived. So it arrives at
    the end at max over h of (start of its stage at hop h + the costs of hops h, h+1, ...), as the executor's
    per-rank clocks give it."""
    start = np.concatenate([[0.0], np.cumsum(stage_times)])
    hops = len(hop_costs)
    if not hops:
        return float(start[-1])
    suffix = np.cumsum(hop_costs[::-1])[::-1]
    return float(max(start[-1], (start[slices - 1:slices - 1 + hops] + suffix).max()))
