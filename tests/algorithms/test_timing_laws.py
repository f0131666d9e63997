"""Simulated times against closed-form laws, on uncontended uniform hardware where the laws are exact.

alpha = route latency + the protocol's per-hop latency; beta = the link bandwidth (both read off the cluster).
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from simcomm.algorithms import Buffers, Collective, ReduceOp, run_collective
from simcomm.algorithms import ring
from simcomm.algorithms.executor import execute
from simcomm.algorithms.protocols import protocol
from simcomm.engine import Simulation
from simcomm.hardware import build_cluster

REL = 1e-6


def simulate(cluster, kind, n, count, algorithm, proto, dtype="float32"):
    sim = Simulation(cluster, "steps")
    proc, _, choice = run_collective(sim, Collective(kind, np.arange(n), count, np.dtype(dtype)), None, algorithm,
                                     proto)
    sim.env.run(proc)
    assert (choice.algorithm, choice.protocol) == (algorithm, proto)
    return sim.now


def intra(cluster, proto_name, family="ring"):
    """(alpha, beta, protocol) between two GPUs of node 0; LL no faster than NCCL's llMaxBw for one node (141 GB/s on
    Hopper, 87.7 on Ampere: it binds the ring's LL, 185 and 120 GB/s at LL's 0.5)."""
    p = protocol(proto_name, family, cluster.device.kind, device_name=cluster.device.name, nodes=1)
    bw, lat, kind = cluster.intra_node
    return lat + p.hop(kind), min(bw * p.efficiency, p.max_rate), p


@pytest.mark.parametrize("preset", ["hgx-h100", "dgx-a100"])
@pytest.mark.parametrize("proto", ["Simple", "LL", "LL128"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_all_reduce_law(preset, proto, n):
    c = build_cluster(preset)
    alpha, beta, p = intra(c, proto)
    for size in (n * 4 * 1024, n * 4 * (1 << 20), n * 4 * (1 << 26)):
        t = simulate(c, "all_reduce", n, size // 4, "ring", proto)
        law = p.base_latency + 2 * (n - 1) * (alpha + size / (n * beta))
        assert t == pytest.approx(law, rel=REL)


def test_ring_all_reduce_busbw_hgx_h100_1gib():
    c = build_cluster("hgx-h100")
    size = 1 << 30
    t = simulate(c, "all_reduce", 8, size // 4, "ring", "Simple")
    busbw = size / t * 2 * 7 / 8
    assert busbw == pytest.approx(370.8e9, rel=0.05)


@pytest.mark.parametrize("preset, nodes, cap", [("hgx-h100", 1, 141e9), ("hgx-h100", 2, 45e9), ("hgx-h100", 4, 35e9),
                                                ("dgx-a100", 1, 87.7e9), ("dgx-a100", 2, 22.5e9)])
def test_ll_is_held_to_nccls_llmaxbw(preset, nodes, cap):
    """NCCL's llMaxBw by GPU generation and node count: the simulated LL ring's busbw (what each rank sends per
    second) reaches it and no more, though its links would carry LL at 0.5 x 370.8 (Hopper NVLink), 0.5 x 384
    (8 NDR NICs per node) and so on; the tree's busiest rank is held to it too, and the prediction follows."""
    from simcomm.algorithms import predict
    c = build_cluster(preset, nodes=nodes)
    n, size = c.num_ranks, 256 << 20
    ring_t = simulate(c, "all_reduce", n, size // 4, "ring", "LL")
    assert size / ring_t * 2 * (n - 1) / n == pytest.approx(cap, rel=0.02)
    tree_t = simulate(c, "all_reduce", n, size // 4, "tree", "LL")
    assert size / tree_t * 2 * (n - 1) / n < cap
    coll = Collective("all_reduce", np.arange(n), size // 4)
    assert predict(c, coll, "ring", "LL") == pytest.approx(ring_t, rel=0.01)
    assert predict(c, coll, "tree", "LL") == pytest.approx(tree_t, rel=0.05)


def _chain_broadcast_time(cluster, n, size, slices, proto_name):
    sim = Simulation(cluster, "steps")
    coll = Collective("broadcast", np.arange(n), size // 4)
    p = protocol(proto_name, "ring", cluster.device.kind)
    plan = partial(ring.chain_broadcast, slices=slices)
    proc = sim.env.process(execute(sim, coll, plan, Buffers(None, ReduceOp.SUM), p, "chain"))
    sim.env.run(proc)
    return sim.now, p


@pytest.mark.parametrize("slices", [1, 2, 5, 16])
@pytest.mark.parametrize("n", [2, 4])
def test_pipelined_chain_broadcast_law(n, slices):
    """The last slice leaves the root after (slices-1) slice times, then crosses n-1 hops:
    T = base + (n - 1 + slices - 1) * S / (slices * beta) + (n - 1) * alpha (latency once per hop)."""
    c = build_cluster("cpu-host", ranks_per_node=4)
    alpha, beta, _ = intra(c, "Simple")
    size = 4 * 5 * 16 * 4096
    t, p = _chain_broadcast_time(c, n, size, slices, "Simple")
    law = p.base_latency + (n + slices - 2) * size / (slices * beta) + (n - 1) * alpha
    assert t == pytest.approx(law, rel=REL)


def test_pipelined_chain_broadcast_law_with_base_latency():
    c = build_cluster("hgx-h100")
    alpha, beta, _ = intra(c, "Simple")
    n, slices, size = 8, 16, 1 << 24
    t, p = _chain_broadcast_time(c, n, size, slices, "Simple")
    law = p.base_latency + (n + slices - 2) * size / (slices * beta) + (n - 1) * alpha
    assert t == pytest.approx(law, rel=REL)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_recursive_doubling_all_reduce_law(n):
    """log2(n) exchanges of the whole buffer, each rank's link carrying one message."""
    c = build_cluster("hgx-h100")
    alpha, beta, p = intra(c, "Simple")
    size = 1 << 22
    t = simulate(c, "all_reduce", n, size // 4, "recursive_doubling", "Simple")
    assert t == pytest.approx(p.base_latency + math.log2(n) * (alpha + size / beta), rel=REL)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_halving_doubling_all_reduce_law(n):
    """2 log2(n) steps moving S/2, S/4, ... then back: 2 log2(n) alpha + 2 S (n-1) / (n beta)."""
    c = build_cluster("hgx-h100")
    alpha, beta, p = intra(c, "Simple")
    size = 4 * n * 4096
    t = simulate(c, "all_reduce", n, size // 4, "halving_doubling", "Simple")
    law = p.base_latency + 2 * math.log2(n) * alpha + 2 * size * (n - 1) / (n * beta)
    assert t == pytest.approx(law, rel=REL)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_nvls_all_reduce_law(n):
    """One pipelined step: every switch link carries S + S/n; NVLS latency once plus one link's latency."""
    c = build_cluster("hgx-h100")
    p = protocol("Simple", "nvls", "gpu")
    up, _ = c.switch_links(0)
    beta = c.link_capacity[up]
    size = 4 * n * (1 << 18)
    t = simulate(c, "all_reduce", n, size // 4, "nvls", "Simple")
    law = p.hop("nvlink") + c.link_latency[up] + size * (1 + 1 / n) / beta
    assert t == pytest.approx(law, rel=REL)


def test_nvls_beats_ring_at_large_sizes_like_nccl_says():
    c = build_cluster("hgx-h100")
    size = 1 << 30
    ring_t = simulate(c, "all_reduce", 8, size // 4, "ring", "Simple")
    nvls_t = simulate(c, "all_reduce", 8, size // 4, "nvls", "Simple")
    assert ring_t / nvls_t > 1.3  # "NVLS ~+30%" (NCCL maintainers); NCCL's own model says more
    busbw = size / nvls_t * 2 * 7 / 8
    nccl_model = 2 * 0.85 * c.intra_node[0] * 15 / 16  # tuning.cc with 16 NVLS channels
    assert busbw == pytest.approx(nccl_model, rel=0.05)


def test_tree_all_reduce_small_message_law():
    """One node, one channel for a small buffer: both trees are the chain 0-1-...-7 (depth 7); K = 1 slice, so
    2 * depth stages, each link carrying the two trees' halves (S in all)."""
    c = build_cluster("hgx-h100")
    alpha, beta, p = intra(c, "LL", "tree")
    size = 8192
    t = simulate(c, "all_reduce", 8, size // 4, "tree", "LL")
    assert t == pytest.approx(p.base_latency + 2 * 7 * (alpha + size / beta), rel=REL)


def test_hierarchical_all_reduce_law():
    """2 nodes x 8: ring reduce-scatter and all-gather in each node, a 2-rank ring per rail between them."""
    c = build_cluster("hgx-h100", nodes=2)
    p = protocol("Simple", "ring", "gpu")
    a_in, b_in = c.intra_node[1] + p.hop("nvlink"), c.intra_node[0]
    b_net, lat_net = c.inter_node
    a_net = lat_net + p.hop("net")
    size, ll, nn = 4 * 16 * (1 << 16), 8, 2
    t = simulate(c, "all_reduce", 16, size // 4, "hierarchical", "Simple")
    law = p.base_latency + 2 * (ll - 1) * (a_in + size / ll / b_in) + 2 * (nn - 1) * (a_net + size / ll / nn / b_net)
    assert t == pytest.approx(law, rel=REL)


@pytest.mark.parametrize("nodes", [2, 4])
def test_tree_and_halving_doubling_beat_ring_small_across_nodes(nodes):
    c = build_cluster("hgx-h100", nodes=nodes)
    n = c.num_ranks
    times = {a: simulate(c, "all_reduce", n, 2048, a, "LL") for a in ("ring", "tree", "halving_doubling",
                                                                        "recursive_doubling")}
    assert times["tree"] < times["ring"]
    assert times["halving_doubling"] < times["ring"]
    assert times["recursive_doubling"] < times["ring"]
    # ... while at 1 GiB the ring's bandwidth wins over recursive doubling's log2(n) full-buffer exchanges
    big = {a: simulate(c, "all_reduce", n, (1 << 30) // 4, a, "Simple") for a in ("ring", "recursive_doubling")}
    assert big["ring"] < big["recursive_doubling"]


def test_tree_busbw_across_nodes_close_to_nccl_model():
    """NCCL: tree all-reduce busBw = 0.92 x the node's network (8 x 48 GB/s capped by NVLink), algbw = busBw/2."""
    c = build_cluster("hgx-h100", nodes=4)
    size = 1 << 30
    t = simulate(c, "all_reduce", 32, size // 4, "tree", "Simple")
    algbw = size / t
    assert algbw == pytest.approx(0.92 * min(c.intra_node[0], 8 * c.inter_node[0]) / 2, rel=0.15)


@pytest.mark.parametrize("algorithm, want", [("ring", 4), ("tree", 2 * 15 / 16 * 4)])
def test_channels_spread_over_nics_that_gpus_share(algorithm, want):
    """aws-p4de: 4 EFA NICs of 12.2 GB/s for 8 GPUs, 4 channels. Each channel crosses through its own NIC (the
    heads and ring hops stride by 2 GPUs), so the ring's busbw is the 4 NICs' sum (it used to be 2 NICs': channel c
    crossed at GPUs c - 1 and c, which share NICs), and the tree's algbw the 4 NICs (each node sends the buffer
    once and receives it once); the tuner's prediction sees the same NICs."""
    c = build_cluster("aws-p4de", nodes=2)
    size = 1 << 30
    t = simulate(c, "all_reduce", 16, size // 4, algorithm, "Simple")
    busbw = size / t * 2 * 15 / 16
    assert busbw == pytest.approx(want * c.template.nic_bandwidth, rel=0.03)
    from simcomm.algorithms import choose
    choice = choose(c, Collective("all_reduce", np.arange(16), size // 4), algorithm=algorithm, protocol="Simple")
    assert choice.predicted == pytest.approx(t, rel=0.05)


@pytest.mark.parametrize("nodes", [2, 4])
def test_all_to_all_across_nodes_is_nic_bound_on_off_node_blocks_only(nodes):
    """Every rank posts its n - 1 sends at once (NCCL's grouped ncclSend/ncclRecv), so each NIC carries its GPU's
    off-node blocks, (n - 8) of them, while NVLink carries the 7 on-node ones alongside. Lockstep shifts (the old
    plan) made every shift wait for its inter-node transfer: about twice this."""
    from simcomm.algorithms.protocols import protocol_for
    c = build_cluster("hgx-h100", nodes=nodes)
    n, blk = 8 * nodes, 64 << 20
    coll = Collective("all_to_all", np.arange(n), blk // 4)
    t = simulate(c, "all_to_all", n, blk // 4, "direct", "Simple")
    p = protocol_for("Simple", "ring", c, coll)
    nic = (n - 8) * blk / (c.template.nic_bandwidth * p.efficiency)
    assert t == pytest.approx(nic, rel=0.02)
    from simcomm.algorithms import choose
    assert choose(c, coll, algorithm="direct", protocol="Simple").predicted == pytest.approx(t, rel=0.05)


def test_net_efficiency_applies_across_nodes_only_and_a_collective_may_have_its_own():
    """Tuning "net" scales the bandwidth of groups that span nodes; "net.all_to_all" replaces it for the alltoall
    (NCCL's plain sends posted at once drive the NICs harder than its rings)."""
    from simcomm.hardware import Tuning
    t = Tuning(efficiency=(("net", 0.8), ("net.all_to_all", 0.95), ("ring", 0.9)))
    assert protocol("Simple", "ring", "gpu", t, "all_reduce", nodes=1).efficiency == pytest.approx(0.9)
    assert protocol("Simple", "ring", "gpu", t, "all_reduce", nodes=2).efficiency == pytest.approx(0.9 * 0.8)
    assert protocol("Simple", "ring", "gpu", t, "all_to_all", nodes=2).efficiency == pytest.approx(0.9 * 0.95)
    assert protocol("Simple", "ring", "gpu", t, "all_to_all", nodes=1).efficiency == pytest.approx(0.9)
