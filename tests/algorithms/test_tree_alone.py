"""The double tree in closed form when it runs alone: the stage-by-stage simulation's times, up to float rounding,
on every kind of node and fabric it takes (spine links that bind included), and the general path otherwise."""
import numpy as np
import pytest

from simcomm.hardware import build_cluster
from simcomm.session import Session

CASES = [("hgx-h100", 2, None), ("hgx-h100", 5, None), ("aws-p4de", 3, None), ("dgx-a100", 4, None),
         ("hgx-h100", 1, None), ("hgx-h100", 24, {"leaf_ports": 4}), ("hgx-h100", 12, {"leaf_ports": 2,
                                                                                      "oversubscription": 2.0})]


def time_of(cluster, size, closed_form, protocol="Simple"):
    s = Session(cluster, detail="steps")
    s.sim.closed_form = closed_form
    ran = s.collective("all_reduce", range(cluster.num_ranks), size, algorithm="tree", protocol=protocol)
    s.run(ran)
    return ran.record.time, s.sim.network.stats, s.sim.memory.free_at.copy()


@pytest.mark.parametrize("preset,nodes,options", CASES)
@pytest.mark.parametrize("size", [1 << 20, 1 << 24, 3 << 25])
def test_closed_form_is_the_stage_by_stage_simulation(preset, nodes, options, size):
    c = build_cluster(preset, nodes=nodes, fabric_options=options)
    alone, stats, memory = time_of(c, size, True)
    steps, _, memory_steps = time_of(c, size, False)
    assert stats["closed_form"] == 1 and stats["transfers"] == 0  # one closed form, no stage on the engine
    assert alone == pytest.approx(steps, rel=1e-12)
    assert np.allclose(memory, memory_steps, rtol=1e-12)  # the reductions' bookings


def test_ll128_and_uneven_shares():
    c = build_cluster("hgx-h100", nodes=3)
    for size, protocol in ((1 << 24, "LL128"), (12345678, "Simple")):
        assert time_of(c, size, True, protocol)[0] == pytest.approx(time_of(c, size, False, protocol)[0], rel=1e-12)


def test_the_general_path_runs_where_the_tree_is_not_alone():
    """With another transfer on the network the tree's stages run on the engine (and are contended)."""
    c = build_cluster("hgx-h100", nodes=2)
    s = Session(c, detail="steps")
    other = s.send([0], [8], "256MiB")
    tree = s.collective("all_reduce", range(16), "256MiB", algorithm="tree", protocol="Simple")
    s.run(s.all_of([other, tree]))
    assert s.sim.network.stats["transfers"] > 1
    alone = time_of(c, 256 << 20, True)[0]
    assert tree.record.time > alone
