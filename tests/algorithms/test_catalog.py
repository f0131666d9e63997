"""Algorithms are objects with explicit placement: a plan called directly on a placed collective gives the schedule
run_collective runs, and running a collective never changes the Collective it was given."""
import dataclasses

import numpy as np
import pytest

from simcomm.algorithms import ALGORITHMS, Buffers, Collective, Placement, algorithm, run_collective
from simcomm.algorithms.catalog import EVERY
from simcomm.engine import Simulation
from simcomm.errors import AlgorithmError
from simcomm.hardware import build_cluster


def test_catalog_lists_every_algorithm_under_each_kind_it_plans():
    for alg in EVERY:
        for kind in alg.plans:
            assert ALGORITHMS[kind][alg.name] is alg
    assert all(ALGORITHMS[kind] for kind in ALGORITHMS)


def test_unknown_algorithm_names_what_exists():
    with pytest.raises(AlgorithmError, match="expected one of .*ring"):
        algorithm("all_reduce", "zzz")


def test_placement_on_cluster_has_a_channel_per_rail_across_nodes():
    one, two = build_cluster("hgx-h100"), build_cluster("hgx-h100", nodes=2)
    assert Placement.on(one) == Placement(one, 8, 1)
    assert Placement.on(two) == Placement(two, 8, 8)


@pytest.mark.parametrize("name,kind", [("ring", "all_reduce"), ("tree", "all_reduce"),
                                       ("hierarchical", "all_reduce"), ("ring", "all_gather")])
def test_direct_plan_call_gives_the_schedule_run_collective_runs(name, kind):
    cluster = build_cluster("hgx-h100", nodes=2)
    coll = Collective(kind, np.arange(16), 1 << 16)
    before = dataclasses.asdict(coll)
    sim = Simulation(cluster, "flows")
    proc, _, _ = run_collective(sim, coll, None, name, "Simple")
    sim.env.run(proc)
    ran = sum(a.nbytes for a in sim.recorder.activities() if a.kind == "send")
    planned = sum(float((st.nbytes * (1 if st.weight is None else st.weight)).sum()) * st.repeat
                  for st in algorithm(kind, name).plan(coll.placed(cluster), Buffers(None, coll.op)))
    assert ran == pytest.approx(planned, rel=1e-12)
    after = dataclasses.asdict(coll)
    assert after.keys() == before.keys() and coll.placement == Placement()  # nothing attached at run time
    flat = sum(float((st.nbytes * (1 if st.weight is None else st.weight)).sum()) * st.repeat
               for st in algorithm(kind, name).plan(coll, Buffers(None, coll.op))) if name != "hierarchical" else 0
    if name == "ring":  # without a placement the ring is one flat ring: the same bytes in fewer, larger flows
        assert flat == pytest.approx(planned, rel=1e-12)
