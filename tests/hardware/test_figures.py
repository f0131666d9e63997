"""Every hardware figure is range-checked where it is built, naming its key: nothing can make times nan or inf
(issue 13: 1e-308 B/s memory bandwidth hung a 2-node run; 1e-308 in nic/pcie/ASTRA bandwidths gave an unrelated
"ring does not support LL")."""
import pytest

from simcomm import build_cluster
from simcomm.hardware import HardwareError
from simcomm.scenario import ScenarioError, load_text


@pytest.mark.parametrize("key", ["memory_bandwidth", "nic_bandwidth", "pcie_bandwidth", "nvlink_bandwidth",
                                 "compute_rate"])
@pytest.mark.parametrize("value", [1e-308, 5e-324, 0.0, 1e300, -1.0])
def test_overrides_outside_the_range_name_their_key(key, value):
    with pytest.raises(HardwareError, match=f"override: {key} must be a number from"):
        build_cluster("hgx-h100", nodes=2, overrides={key: value})


@pytest.mark.parametrize("key, value", [("nvlink_latency", 1e30), ("nic_latency", -1e-9),
                                        ("memory_capacity", 1e30)])
def test_latency_and_capacity_ranges(key, value):
    with pytest.raises(HardwareError, match=f"{key} must be a number from"):
        build_cluster("hgx-h100", overrides={key: value})


def test_fabric_options_are_range_checked():
    with pytest.raises(HardwareError, match="oversubscription must be a number from 0.015625 to 64"):
        build_cluster("hgx-h100", nodes=16, fabric_options={"oversubscription": 1e-308, "leaf_ports": 8})


def test_a_scenario_with_a_tiny_figure_fails_validation_naming_the_key():
    text = ("cluster:\n  preset: hgx-h100\n  nodes: 2\n  overrides:\n    memory_bandwidth: 1e-308\n"
            "workload: {kind: perf, collectives: [all_reduce], sizes: [1MiB]}\n")
    with pytest.raises(ScenarioError, match=r"cluster.overrides: .*memory_bandwidth must be a number from 1 to "
                                            r"1e\+16 B/s, got 1e-308"):
        load_text(text, "s.yaml")


@pytest.mark.parametrize("bandwidth", ["[1e-300B/s, 400Gbps]", "[370GB/s, 1e-300bps]"])
def test_astra_dimensions_with_a_tiny_bandwidth_are_refused(bandwidth):
    text = (f"cluster:\n  topology: [Switch, Switch]\n  npus_count: [8, 2]\n  bandwidth: {bandwidth}\n"
            "  latency: [700ns, 2us]\nworkload: {kind: perf, collectives: [all_reduce], sizes: [1MiB]}\n")
    with pytest.raises(ScenarioError, match="bandwidth must be a number from 1 to 1e\\+16 B/s"):
        load_text(text, "s.yaml")
