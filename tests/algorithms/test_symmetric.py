"""The double tree's and NVLS-Tree's closed forms when a collective runs alone (symmetric.py, tree_alone.py,
nvls_tree_alone.py): the stage-by-stage simulation's times and memory bookings, up to float rounding, on every
kind of node and on fabrics whose spine links bind; the general path wherever the symmetry does not hold."""
import numpy as np
import pytest

from simcomm.hardware import build_cluster
from simcomm.session import Session

SPINES = [("hgx-h100", 24, {"leaf_ports": 4}), ("hgx-h100", 12, {"leaf_ports": 2, "oversubscription": 2.0})]
CASES = {"tree": [("hgx-h100", 2, None), ("hgx-h100", 5, None), ("aws-p4de", 3, None), ("dgx-a100", 4, None),
                  ("hgx-h100", 1, None), *SPINES],
         "nvls_tree": [("hgx-h100", 2, None), ("hgx-h100", 5, None), ("aws-p5", 3, None), ("hgx-h200", 4, None),
                       *SPINES]}


def run(cluster, size, algorithm, closed_form, protocol="Simple"):
    s = Session(cluster, detail="steps")
    s.sim.closed_form = closed_form
    ran = s.collective("all_reduce", range(cluster.num_ranks), size, algorithm=algorithm, protocol=protocol)
    s.run(ran)
    return ran.record.time, s.sim.network.stats, s.sim.memory.free_at.copy()


@pytest.mark.parametrize("algorithm,preset,nodes,options",
                         [(a, *case) for a, cases in CASES.items() for case in cases])
@pytest.mark.parametrize("size", [1 << 20, 1 << 24, 3 << 25])
def test_closed_form_is_the_stage_by_stage_simulation(algorithm, preset, nodes, options, size):
    c = build_cluster(preset, nodes=nodes, fabric_options=options)
    alone, stats, memory = run(c, size, algorithm, True)
    steps, _, memory_steps = run(c, size, algorithm, False)
    assert stats["closed_form"] == 1 and stats["transfers"] == 0  # one closed form, no stage on the engine
    assert alone == pytest.approx(steps, rel=1e-12)
    assert np.allclose(memory, memory_steps, rtol=1e-12)  # the reductions' bookings


@pytest.mark.parametrize("algorithm,size,protocol", [("tree", 1 << 24, "LL128"), ("tree", 12345678, "Simple"),
                                                     ("tree", 1 << 24, "LL"), ("nvls_tree", 1000003 * 4, "Simple")])
def test_other_protocols_and_uneven_shares(algorithm, size, protocol):
    """LL128 has its closed form; LL's cap and shares that differ go stage by stage: the same times either way."""
    c = build_cluster("hgx-h100", nodes=3)
    alone, stats, _ = run(c, size, algorithm, True, protocol)
    assert alone == pytest.approx(run(c, size, algorithm, False, protocol)[0], rel=1e-12)
    assert (stats["transfers"] == 0) == (protocol == "LL128")


def test_the_general_path_runs_where_the_collective_is_not_alone():
    """With another transfer on the network the tree's stages run on the engine (and are contended)."""
    c = build_cluster("hgx-h100", nodes=2)
    s = Session(c, detail="steps")
    other = s.send([0], [8], "256MiB")
    tree = s.collective("all_reduce", range(16), "256MiB", algorithm="tree", protocol="Simple")
    s.run(s.all_of([other, tree]))
    assert s.sim.network.stats["transfers"] > 1
    assert tree.record.time > run(c, 256 << 20, "tree", True)[0]
