import pytest

from simcomm.hardware import (PRESETS, Cluster, HardwareError, build_cluster, build_fabric, describe_preset,
                              list_presets)
from simcomm.hardware.fabrics import fat_tree, rail_optimised, single_switch
from simcomm.hardware.presets import cpu_host, hgx_h100

RANKS = {"dgx-a100": 8, "hgx-h100": 8, "hgx-h200": 8, "hgx-h800": 8, "aws-p5": 8, "aws-p4de": 8, "pcie-4gpu": 4,
         "cpu-host": 4}
DESCRIBE_KEYS = {"name", "template", "description", "nodes", "ranks_per_node", "ranks", "device", "device_kind",
                 "memory_bandwidth", "memory_capacity", "compute_rate", "intra_node", "inter_node", "nvls", "links",
                 "sources"}


def test_registry_lists_all_presets():
    assert list_presets() == list(PRESETS) == list(RANKS)


@pytest.mark.parametrize("preset", list(RANKS))
@pytest.mark.parametrize("nodes", [1, 2])
def test_every_preset_builds(preset, nodes):
    c = build_cluster(preset, nodes)
    assert isinstance(c, Cluster)
    assert c.ranks_per_node == RANKS[preset] and c.num_ranks == nodes * RANKS[preset]
    d = c.describe()
    assert DESCRIBE_KEYS <= set(d)
    assert d["ranks"] == c.num_ranks and d["nodes"] == nodes
    assert d["intra_node"]["bandwidth"] > 0 and d["intra_node"]["latency"] > 0
    if nodes == 1:
        assert c.name == preset and c.fabric is None
    else:
        assert c.name == f"2x {preset} ({PRESETS[preset].default_fabric})"
        assert d["inter_node"]["bandwidth"] > 0 and d["inter_node"]["latency"] > 0


def test_describe_preset_adds_registry_fields():
    d = describe_preset("cpu-host", nodes=2)
    assert DESCRIBE_KEYS <= set(d)
    assert d["params"] == {"ranks_per_node": 4, "host_bandwidth": None} and d["default_fabric"] == "fat-tree"
    assert d["device_kind"] == "cpu" and d["ranks"] == 8
    assert "nvlink_bandwidth" in d["overrides"]


@pytest.mark.parametrize("preset,nvls,mem,cap", [
    ("hgx-h100", True, 3.0e12, 80 * 2**30), ("hgx-h200", True, 4.3e12, 141e9), ("dgx-a100", False, 2.0e12, 80 * 2**30),
])
def test_device_figures(preset, nvls, mem, cap):
    d = describe_preset(preset)
    assert d["nvls"] is nvls and d["memory_bandwidth"] == mem and d["memory_capacity"] == cap
    assert "crossbar" in d["description"]


def test_h800_is_an_h100_with_400_gb_s_nvlink():
    """8 NVLink4 links per GPU instead of 18 (400 GB/s bidirectional line rate); at NCCL's effective 20.6 GB/s per
    link that is the ~160 GB/s per direction DeepSeek reports usable (moe.md section 6). The same GPU."""
    h800, h100 = build_cluster("hgx-h800"), build_cluster("hgx-h100")
    assert h800.intra_node[0] == pytest.approx(h100.intra_node[0] * 8 / 18)
    assert h800.intra_node[0] == pytest.approx(160e9, rel=0.05)
    assert (h800.device.compute_rate, h800.device.memory_capacity) == (h100.device.compute_rate,
                                                                       h100.device.memory_capacity)


def test_cpu_host_ranks_per_node():
    c = build_cluster("cpu-host", nodes=2, ranks_per_node=6)
    assert c.ranks_per_node == 6 and c.num_ranks == 12
    assert not c.device.fused_reduction and c.device.kind == "cpu"
    bw, lat, kind = c.intra_node
    assert kind == "loopback" and bw == 5e9 and lat == pytest.approx(30e-6)


def test_ranks_per_node_fixed_on_gpu_presets():
    assert build_cluster("hgx-h100", ranks_per_node=8).num_ranks == 8  # the native count is fine
    with pytest.raises(HardwareError, match="fixed 8 ranks per node"):
        build_cluster("hgx-h100", ranks_per_node=4)
    with pytest.raises(HardwareError, match="ranks_per_node"):
        build_cluster("cpu-host", ranks_per_node=0)


def test_overrides():
    c = build_cluster("hgx-h100", 2, overrides={"nvlink_bandwidth": 300e9, "nic_bandwidth": 25e9,
                                                 "memory_capacity": 40e9, "nvlink_latency": 0.4e-6})
    bw, lat, _ = c.intra_node
    assert bw == 300e9 and lat == pytest.approx(0.8e-6)
    assert c.device.memory_capacity == 40_000_000_000 and isinstance(c.device.memory_capacity, int)
    assert c.inter_node[0] == 25e9
    assert "overrides" in c.template.description
    c = build_cluster("cpu-host", overrides={"loopback_bandwidth": 1e9, "loopback_latency": 5e-6})
    assert c.intra_node[:2] == (1e9, pytest.approx(10e-6))


def test_override_errors():
    with pytest.raises(HardwareError, match="unknown override.*nvlink_bw.*valid overrides"):
        build_cluster("hgx-h100", overrides={"nvlink_bw": 1e9})
    with pytest.raises(HardwareError, match="no nvlink links"):
        build_cluster("pcie-4gpu", overrides={"nvlink_bandwidth": 1e9})
    with pytest.raises(HardwareError, match="pcie_bandwidth must be a number from 1 to 1e"):
        build_cluster("hgx-h100", overrides={"pcie_bandwidth": 0})
    with pytest.raises(HardwareError, match="compute_rate must be a number"):
        build_cluster("hgx-h100", overrides={"compute_rate": "1 PF"})


def test_routes_prefer_bandwidth_over_latency():
    # A slow-to-start NVLink still beats the PCIe detour: routes take the widest path first, as NCCL does.
    c = build_cluster("hgx-h100", overrides={"nvlink_latency": 1e-6})
    assert {c.link_kind[j] for j in c.route(0, 1)} == {"nvlink"}
    assert c.bottleneck(0, 1) == (370.8e9, pytest.approx(2e-6))


def test_unknown_preset_suggests():
    with pytest.raises(HardwareError, match="did you mean 'hgx-h100'"):
        build_cluster("hgx-h10")
    with pytest.raises(HardwareError, match="valid presets: dgx-a100"):
        build_cluster("tpu-v5")
    assert build_cluster("HGX_H100").name == "hgx-h100"


@pytest.mark.parametrize("nodes", [0, -1, 1.5, True])
def test_bad_node_count(nodes):
    with pytest.raises(HardwareError, match="nodes"):
        build_cluster("hgx-h100", nodes)


def test_fabric_choice_and_errors():
    assert build_cluster("hgx-h100", 4, fabric="fat-tree").fabric.kind == "fat-tree"
    assert build_cluster("hgx-h100", 4, fabric="switch").fabric.switches == ("switch0",)
    assert build_cluster("hgx-h100", 4, fabric="rail-optimized").fabric.kind == "rail-optimised"
    with pytest.raises(HardwareError, match="valid fabrics: rail-optimised, fat-tree, switch"):
        build_cluster("hgx-h100", 2, fabric="torus")
    with pytest.raises(HardwareError, match="does not take option"):
        build_cluster("hgx-h100", 2, fabric_options={"radix": 64})
    c = build_cluster("hgx-h100", 2, fabric="fat-tree", fabric_options={"leaf_ports": 4, "oversubscription": 2})
    assert len([s for s in c.fabric.switches if s.startswith("spine")]) == 2


def test_rail_optimised_layout():
    f = rail_optimised(num_nodes=64, nics_per_node=8, link_bandwidth=48e9, leaf_ports=32)
    leaves = [s for s in f.switches if ".leaf" in s]
    spines = [s for s in f.switches if s.startswith("spine")]
    assert len(leaves) == 16 and len(spines) == 32
    assert f.attach(33, 5) == "rail5.leaf1" and f.attach(0, 0) == "rail0.leaf0"
    assert len(f.links) == 2 * 16 * 32 and {link.kind for link in f.links} == {"net"}
    one = rail_optimised(num_nodes=4, nics_per_node=1, link_bandwidth=48e9)
    assert one.switches == ("rail0.leaf0",) and one.links == ()


def test_fat_tree_and_switch_layout():
    f = fat_tree(num_nodes=8, nics_per_node=8, link_bandwidth=48e9, leaf_ports=32, oversubscription=4)
    assert [s for s in f.switches if s.startswith("leaf")] == ["leaf0", "leaf1"]
    assert len([s for s in f.switches if s.startswith("spine")]) == 8
    assert f.attach(3, 7) == "leaf0" and f.attach(4, 0) == "leaf1"
    s = single_switch(num_nodes=3, nics_per_node=2, link_bandwidth=1e9)
    assert s.attach(2, 1) == "switch0" and s.links == ()
    with pytest.raises(HardwareError, match="valid fabrics"):
        build_fabric("mesh", 2, hgx_h100())
    with pytest.raises(HardwareError, match="leaf_ports"):
        fat_tree(2, 8, 48e9, leaf_ports=0)


def test_fabric_is_picklable():
    import pickle

    f = build_cluster("hgx-h100", 3).fabric
    g = pickle.loads(pickle.dumps(f))
    assert g.attach(2, 4) == f.attach(2, 4) == "rail4.leaf0"


def test_templates_are_consistent():
    for p in PRESETS.values():
        t = p.builder()
        assert t.name == p.name and t.sources and t.nics
        assert all(v in t.vertices for v in ("nic0",))
    assert cpu_host(2).endpoints == ("cpu0", "cpu1")


def test_aws_p4de_shares_one_efa_nic_between_the_two_gpus_of_a_pcie_switch():
    c = build_cluster("aws-p4de", 2)
    t = c.template
    assert t.nics == ("nic0", "nic1", "nic2", "nic3") and t.endpoint_nic == (0, 0, 1, 1, 2, 2, 3, 3)
    assert t.nic_bandwidth == pytest.approx(12.2e9) and not t.nvls
    # GPU 5 leaves through nic2, on its own PCIe switch
    names = [c.link_name(link) for link in c.route(5, 13)]
    assert names[:3] == ["n0.gpu5->n0.pcie2", "n0.pcie2->n0.nic2", "n0.nic2->rail2.leaf0"]


def test_aws_p5_has_a_400g_efa_rail_per_gpu_and_nvls():
    t = build_cluster("aws-p5", 2).template
    assert t.endpoint_nic == tuple(range(8)) and t.nic_bandwidth == pytest.approx(4 * 12.2e9) and t.nvls
