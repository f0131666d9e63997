import functools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.hardware import HardwareError, build_cluster, list_presets


def names(c, src, dst):
    return [c.link_name(int(j)) for j in c.route(src, dst)]


def kinds(c, src, dst):
    return [c.link_kind[int(j)] for j in c.route(src, dst)]


def check_chain(c, src, dst):
    """The route is a connected chain of graph edges from src to dst that crosses no third endpoint."""
    hops = [n.split("->") for n in names(c, src, dst)]
    assert hops and hops[0][0] == c.rank_name(src) and hops[-1][1] == c.rank_name(dst)
    g = c.graph
    for (a, b), (b2, _) in zip(hops, hops[1:]):
        assert b == b2
        assert g.nodes[b]["kind"] not in ("gpu", "cpu")
    assert all(g.has_edge(a, b) for a, b in hops)


def test_hgx_h100_intra_node_is_nvlink():
    c = build_cluster("hgx-h100")
    assert kinds(c, 0, 1) == ["nvlink", "nvlink"]
    assert names(c, 0, 1) == ["n0.gpu0->n0.nvswitch", "n0.nvswitch->n0.gpu1"]
    bw, lat = c.bottleneck(0, 1)
    assert bw == pytest.approx(370.8e9) and lat == pytest.approx(0.7e-6)
    # GPUs on different PCIe switches and sockets still talk over NVLink.
    assert kinds(c, 0, 7) == ["nvlink", "nvlink"]


def test_dgx_a100_nvlink_bandwidth():
    c = build_cluster("dgx-a100")
    assert c.bottleneck(2, 5)[0] == pytest.approx(240e9)
    assert set(kinds(c, 2, 5)) == {"nvlink"}


def test_pcie_4gpu_routes():
    c = build_cluster("pcie-4gpu")
    assert kinds(c, 0, 1) == ["pcie", "pcie"]
    assert names(c, 0, 1) == ["n0.gpu0->n0.pcie0", "n0.pcie0->n0.gpu1"]
    assert names(c, 0, 2) == ["n0.gpu0->n0.pcie0", "n0.pcie0->n0.cpu_root0", "n0.cpu_root0->n0.pcie1",
                              "n0.pcie1->n0.gpu2"]
    assert c.bottleneck(0, 2)[0] == 24e9


def test_inter_node_rail_route():
    c = build_cluster("hgx-h100", 2)
    assert names(c, 3, 11) == ["n0.gpu3->n0.pcie1", "n0.pcie1->n0.nic3", "n0.nic3->rail3.leaf0",
                               "rail3.leaf0->n1.nic3", "n1.nic3->n1.pcie1", "n1.pcie1->n1.gpu3"]
    assert kinds(c, 3, 11) == ["pcie", "pcie", "net", "net", "pcie", "pcie"]
    assert c.bottleneck(3, 11)[0] == 48e9
    # Cross-rail traffic climbs to a spine.
    assert any(n.startswith("spine") for hop in names(c, 3, 13) for n in hop.split("->"))
    check_chain(c, 3, 13)


def test_cpu_host_routes():
    c = build_cluster("cpu-host", 2, ranks_per_node=3)
    assert names(c, 0, 1) == ["n0.cpu0->n0.loopback", "n0.loopback->n0.cpu1"]
    assert kinds(c, 0, 4)[0] == "loopback" and "net" in kinds(c, 0, 4)
    check_chain(c, 0, 4)


@pytest.mark.parametrize("preset,nodes,fabric", [
    ("hgx-h100", 5, "rail-optimised"), ("dgx-a100", 3, "fat-tree"), ("pcie-4gpu", 9, "fat-tree"),
    ("cpu-host", 4, "switch"),
])
def test_routing_is_deterministic_and_connected(preset, nodes, fabric):
    opts = {"leaf_ports": 4}
    a = build_cluster(preset, nodes, fabric=fabric, fabric_options=None if fabric == "switch" else opts)
    b = build_cluster(preset, nodes, fabric=fabric, fabric_options=None if fabric == "switch" else opts)
    rng = random.Random(1234)
    pairs = [tuple(rng.sample(range(a.num_ranks), 2)) for _ in range(500)]
    for s, d in reversed(pairs):  # a different first-use order must not change anything
        b.route(s, d)
    for s, d in pairs:
        assert np.array_equal(a.route(s, d), b.route(s, d))
    for s, d in pairs[:100]:
        check_chain(a, s, d)


def test_fat_tree_ecmp_spreads_over_spines():
    c = build_cluster("hgx-h100", 128, fabric="fat-tree")
    assert sum(s.startswith("spine") for s in c.fabric.switches) == 32
    rng = random.Random(7)
    spines = set()
    for _ in range(400):
        s, d = rng.sample(range(c.num_ranks), 2)
        for hop in names(c, s, d):
            spines.update(v for v in hop.split("->") if v.startswith("spine"))
    assert len(spines) > 8


def test_route_errors():
    c = build_cluster("hgx-h100", 2)
    with pytest.raises(HardwareError, match="out of range"):
        c.route(0, 16)
    with pytest.raises(HardwareError, match="out of range"):
        c.route(-1, 3)
    assert len(c.route(4, 4)) == 0


@functools.lru_cache(maxsize=None)
def cached_cluster(preset, nodes):
    return build_cluster(preset, nodes)


@settings(max_examples=60, deadline=None)
@given(preset=st.sampled_from(list_presets()), nodes=st.integers(1, 8), data=st.data())
def test_any_route_has_positive_cost_and_is_cached(preset, nodes, data):
    c = cached_cluster(preset, nodes)
    a = data.draw(st.integers(0, c.num_ranks - 1))
    b = data.draw(st.integers(0, c.num_ranks - 1).filter(lambda x: x != a))
    bw, lat = c.bottleneck(a, b)
    assert bw > 0 and lat > 0
    rid = c.route_id(a, b)
    assert c.route_id(a, b) == rid and c.route_latency[rid] == lat
    assert np.array_equal(c.route(a, b), c.route_links[rid])


@pytest.mark.parametrize("fabric,opts", [("rail-optimised", {"leaf_ports": 4}), ("fat-tree", {"leaf_ports": 8}),
                                         ("rail-optimised", {"leaf_ports": 2, "oversubscription": 2.0})])
def test_leaf_spine_routes_by_symmetry_equal_the_search(fabric, opts):
    """A two-tier leaf-spine is routed in bulk by its shape; the switch-by-switch search (any fabric) gives the
    same hops, ECMP choices included."""
    c = build_cluster("hgx-h100", 12, fabric=fabric, fabric_options=opts)
    fab = c._fabric_paths
    assert fab.clos is not None
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, c.num_ranks, 2000), rng.integers(0, c.num_ranks, 2000)
    keep = src // 8 != dst // 8
    src, dst = src[keep], dst[keep]
    nic = np.asarray(c.template.endpoint_nic)
    a, b = fab.attach[src // 8, nic[src % 8]], fab.attach[dst // 8, nic[dst % 8]]
    lengths, links = fab.middle(a, b, src * 1_000_003 + dst)
    got = np.split(links, np.cumsum(lengths)[:-1])
    assert (lengths == 2).any()
    for k in range(len(src)):
        want = fab.path(int(a[k]), int(b[k]), int(src[k]) * 1_000_003 + int(dst[k])) if a[k] != b[k] else []
        assert got[k].tolist() == want


def test_route_latency_is_the_sum_of_its_links():
    for preset in list_presets():
        c = build_cluster(preset, 3)
        rids = c.route_ids(np.repeat(np.arange(c.num_ranks), c.num_ranks), np.tile(np.arange(c.num_ranks), c.num_ranks))
        for r in np.unique(rids).tolist():
            assert c.route_latency[r] == c.link_latency[c.route_links[r]].sum()
