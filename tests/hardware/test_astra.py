"""Clusters from ASTRA-sim style dimensions (the scenario's dimension form is built here)."""
import pytest

from simcomm.hardware import Dimensions, build_astra_cluster


@pytest.mark.parametrize("kind,hops", [("Switch", 2), ("FullyConnected", 1), ("Ring", 4)])
def test_first_dimension_topologies(kind, hops):
    c = build_astra_cluster(Dimensions((kind,), (4,), (100e9,), (1e-6,)))
    assert c.num_ranks == 4 and c.num_nodes == 1
    assert len(c.route(0, 2)) == hops  # through the switch; direct; npu0 -> r0 -> r1 -> r2 -> npu2


def test_two_dimensions_and_device_figures():
    c = build_astra_cluster(Dimensions(("Switch", "Switch"), (8, 4), (370e9, 50e9), (0.7e-6, 2e-6),
                                       compute_rate=500e12))
    assert (c.num_ranks, c.ranks_per_node, c.num_nodes) == (32, 8, 4)
    assert c.inter_node[0] == pytest.approx(50e9) and c.device.compute_rate == 500e12
