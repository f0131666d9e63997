"""NVLS-Tree in closed form when it runs alone: the stage-by-stage simulation's times, up to float rounding, on
the NVLS presets and on fabrics whose spine links bind; the general path otherwise."""
import numpy as np
import pytest

from simcomm.hardware import build_cluster
from simcomm.session import Session

CASES = [("hgx-h100", 2, None), ("hgx-h100", 5, None), ("aws-p5", 3, None), ("hgx-h200", 4, None),
         ("hgx-h100", 24, {"leaf_ports": 4}), ("hgx-h100", 12, {"leaf_ports": 2, "oversubscription": 2.0})]


def time_of(cluster, size, closed_form):
    s = Session(cluster, detail="steps")
    s.sim.closed_form = closed_form
    ran = s.collective("all_reduce", range(cluster.num_ranks), size, algorithm="nvls_tree")
    s.run(ran)
    return ran.record.time, s.sim.network.stats, s.sim.memory.free_at.copy()


@pytest.mark.parametrize("preset,nodes,options", CASES)
@pytest.mark.parametrize("size", [1 << 20, 1 << 24, 3 << 25])
def test_closed_form_is_the_stage_by_stage_simulation(preset, nodes, options, size):
    c = build_cluster(preset, nodes=nodes, fabric_options=options)
    alone, stats, memory = time_of(c, size, True)
    steps, _, memory_steps = time_of(c, size, False)
    assert stats["closed_form"] == 1 and stats["transfers"] == 0
    assert alone == pytest.approx(steps, rel=1e-12)
    assert np.allclose(memory, memory_steps, rtol=1e-12)


def test_uneven_shards_take_the_general_path():
    c = build_cluster("hgx-h100", nodes=2)
    alone, stats, _ = time_of(c, 1000003 * 4, True)
    assert stats["closed_form"] != 1 or stats["transfers"] > 0
    assert alone == pytest.approx(time_of(c, 1000003 * 4, False)[0], rel=1e-12)
