"""Runs of repeated steps timed in closed form give exactly the times the step-by-step path gives.

Each case runs the same schedule twice, with Simulation.closed_form on and off ("steps" detail; the symmetric
closed forms of collectives alone, tested in test_symmetric.py, left out), and compares
every recorded time bitwise: collectives alone (uncontended), and collectives that meet other traffic on their
links or other work on their ranks' memory midway (contended), where the run must be cut and finished step by step.
"""
import numpy as np
import pytest

from simcomm.engine import Simulation
from simcomm.hardware import build_cluster
from simcomm.session import Session


def _session(cluster, closed_form: bool) -> Session:
    return Session(simulation=Simulation(cluster, "steps", closed_form=closed_form, symmetric=False))


def _times(cluster, schedule, closed_form: bool):
    s = _session(cluster, closed_form)
    ops = schedule(s)
    s.run()
    spans = sorted((a.kind, a.rank, a.start, a.end) for a in s.sim.recorder.activities())
    return [(o.start, o.end) for o in ops], spans, s.stats()


def _same(cluster, schedule):
    fast, fast_spans, fast_stats = _times(cluster, schedule, True)
    slow, slow_spans, slow_stats = _times(cluster, schedule, False)
    assert fast == slow  # bitwise: the closed form does the step-by-step arithmetic, once per class of clocks
    assert fast_spans == slow_spans
    assert fast_stats["transfers"] == slow_stats["transfers"]  # every step is accounted for
    return fast_stats, slow_stats


H100x4 = build_cluster("hgx-h100", nodes=4)


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical", "tree", "nvls_tree", None])
@pytest.mark.parametrize("size", ["8KiB", "3MiB", "256MiB"])
def test_uncontended_all_reduce(algorithm, size):
    fast, slow = _same(H100x4, lambda s: [s.collective("all_reduce", range(32), size, algorithm=algorithm)])
    if algorithm == "ring" or (algorithm == "nvls_tree" and size == "256MiB"):  # nvls_tree: 128 slices
        assert fast["events"] < slow["events"] / 4  # the repeats really were closed form


@pytest.mark.parametrize("kind", ["all_gather", "reduce_scatter", "broadcast", "reduce"])
def test_uncontended_other_collectives(kind):
    _same(H100x4, lambda s: [s.collective(kind, range(32), "96MiB", algorithm="ring")])


def test_subgroups_and_odd_sizes():
    c = build_cluster("hgx-h100", nodes=2)
    _same(c, lambda s: [s.collective("all_reduce", [0, 3, 5, 6, 9, 12], 1000003, dtype="bfloat16",
                                     algorithm="ring")])


@pytest.mark.parametrize("size", ["1KiB", "4MiB", "64MiB"])
def test_cpu_reductions_that_hold_up_every_step(size):
    """gloo on CPU processes: reductions are not fused, they delay the data and stall the next step."""
    c = build_cluster("cpu-host", ranks_per_node=16)
    _same(c, lambda s: [s.collective("all_reduce", range(16), size, numerics="gloo")])


def test_contended_by_a_collective_on_shared_nics():
    """A second all-reduce joins midway on the same NICs: both rings are cut and finish step by step."""
    def schedule(s):
        first = s.collective("all_reduce", range(32), "256MiB", algorithm="ring")
        late = s.timeout(300e-6)
        return [first, s.collective("all_reduce", range(32), "64MiB", algorithm="ring", after=[late])]
    _same(H100x4, schedule)


def test_contended_by_p2p_midway_and_a_later_quiet_spell():
    """A burst of sends shares a few links for a while; afterwards the ring replays in closed form again."""
    def schedule(s):
        ring = s.collective("all_reduce", range(32), "512MiB", algorithm="ring")
        wait = s.timeout(500e-6)
        return [ring, s.send([0, 9], [17, 30], "32MiB", after=[wait])]
    fast, _ = _same(H100x4, schedule)
    assert fast["closed_form"] > 0


def test_link_disjoint_traffic_does_not_cut_the_run():
    """Tensor-parallel traffic inside node 3 while data parallel crosses nodes 0-2: no shared link."""
    def schedule(s):
        dp = s.collective("all_reduce", range(24), "256MiB", algorithm="ring")
        tp = [s.collective("all_reduce", range(24, 32), "16MiB", algorithm="ring",
                           after=[s.timeout(100e-6 * i)]) for i in range(1, 4)]
        return [dp, *tp]
    fast, slow = _same(H100x4, schedule)
    assert fast["events"] < slow["events"] / 2


@pytest.mark.parametrize("at", [2e-3, 9.5e-3, 14e-3, 30e-3])
def test_contended_memory_cuts_the_run(at):
    """Other memory work on the ring's ranks midway: the reductions queue behind it, as step by step."""
    c = build_cluster("cpu-host", ranks_per_node=8)

    def schedule(s):
        ring = s.collective("all_reduce", range(8), "64MiB", numerics="gloo")
        return [ring, s.memory_op([2, 5], "64MiB", after=[s.timeout(at)])]
    _same(c, schedule)


def test_flows_detail_records_every_repeat():
    c = build_cluster("hgx-h100", nodes=2)
    s = Session(c, detail="flows")
    s.collective("all_reduce", range(16), "1MiB", algorithm="ring")
    s.run()
    sends = [a for a in s.sim.recorder.activities() if a.kind == "send"]
    labels = {a.label.rsplit(" ", 1)[-1] for a in sends if "reduce-scatter" in a.label}
    assert labels == {f"{i}/15" for i in range(1, 16)}


def test_steps_detail_keeps_aggregates_not_per_rank_rows():
    s = Session(build_cluster("hgx-h100", nodes=4), detail="steps")
    s.collective("all_reduce", range(32), "64MiB", algorithm="ring")
    s.run()
    rows = s.sim.recorder.step_rows()
    assert rows and all(r.kind == "hbm" and r.ranks == 32 for r in rows)
    assert sum(r.steps for r in rows) == 31  # one reduction per reduce-scatter step
    assert not [a for a in s.sim.recorder.activities() if a.kind == "hbm"]
    np.testing.assert_allclose(sum(r.amount for r in rows), 31 * 32 * 3 * (64 << 20) / 32, rtol=1e-12)


@pytest.mark.parametrize("kind", ["all_reduce", "broadcast", "reduce"])
def test_tree_steady_state_in_closed_form(kind):
    """A pipelined tree's full stages (every edge busy with a full slice) are one step repeated."""
    fast, slow = _same(H100x4, lambda s: [s.collective(kind, range(32), "256MiB", algorithm="tree")])
    assert fast["closed_form"] > 0 and fast["events"] < slow["events"] / 2


def test_tree_contended_by_a_ring_and_p2p_midway():
    """A ring all-reduce on the same NICs and a burst of sends arrive while the tree is in its steady state."""
    def schedule(s):
        tree = s.collective("all_reduce", range(32), "512MiB", algorithm="tree")
        ring = s.collective("all_reduce", range(32), "32MiB", algorithm="ring", after=[s.timeout(400e-6)])
        return [tree, ring, s.send([1, 10], [18, 27], "16MiB", after=[s.timeout(900e-6)])]
    _same(H100x4, schedule)


@pytest.mark.parametrize("size", ["4MiB", "64MiB"])
def test_tree_with_cpu_reductions(size):
    """Reductions not fused with the transfer delay the data (the executor's "add" mode) on a tree too."""
    c = build_cluster("cpu-host", nodes=2, ranks_per_node=4)
    _same(c, lambda s: [s.collective("all_reduce", range(8), size, algorithm="tree")])
