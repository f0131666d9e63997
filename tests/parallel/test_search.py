"""Layout search: every valid layout enumerated, memory checked, bounded below (each bound below the next), the
best simulated and proven."""
from types import SimpleNamespace

import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import TrainingConfig, model_preset
from simcomm.parallel import search
from simcomm.parallel.step_cost import StepModel


@pytest.fixture(scope="module")
def planned():
    cluster = build_cluster("hgx-h100", nodes=2)
    model = model_preset("llama3-8b", num_layers=8)
    base = TrainingConfig(global_batch_size=16)
    space = search.SearchSpace(micro_batch_size=(1, 2), recompute=(None, "full"))
    return cluster, model, base, search.plan(model, base, cluster, space, jobs=1, simulate_at_least=4,
                                             max_simulate=40)


def test_candidates_cover_the_space():
    cands = search.candidates(model_preset("llama3-8b", num_layers=8), TrainingConfig(global_batch_size=16), 16, 8,
                              search.SearchSpace(micro_batch_size=(1,), recompute=(None,), zero=(0,)))
    shapes = {(c.tp, c.pp) for c in cands}
    assert shapes == {(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8) if 16 % (t * p) == 0}
    inter = [c for c in cands if c.schedule == "interleaved_1f1b"]
    assert {(c.pp, c.v) for c in inter} >= {(2, 2), (2, 4), (4, 2)} and all(c.pp > 1 for c in inter)


def test_the_best_is_simulated_and_proven(planned):
    cluster, model, base, res = planned
    assert res.enumerated == len(res.rows) and res.simulated >= 4 and res.proven
    sims = [r for r in res.rows if "step_time" in r]
    assert [r["step_time"] for r in sims] == sorted(r["step_time"] for r in sims)
    for r in res.rows:
        if "step_time" in r:
            assert r["bound"] <= r["step_time"] * (1 + 1e-9)  # the bound is a lower bound
        elif "bound" in r:
            assert r["bound"] >= sims[0]["step_time"]  # proven: nothing left could beat the best
    assert all(not r.get("fits") for r in res.rows if "peak_memory" in r and "bound" not in r)


def test_a_planned_step_is_the_step_model(planned):
    cluster, model, base, res = planned
    best = next(r for r in res.rows if "step_time" in r)
    cand = search.Candidate(best["tp"], best["pp"], best["cp"], best["mbs"], best["schedule"], best["v"],
                            best["zero"], None if best["recompute"] == "none" else best["recompute"])
    from simcomm.parallel import build_layout
    layout = build_layout(model, cand.config(base), cluster.num_ranks)
    assert StepModel(layout, cluster).run().step_time == pytest.approx(best["step_time"], rel=1e-12)


def test_parallel_workers_give_the_same_plan(planned):
    cluster, model, base, res = planned
    space = search.SearchSpace(micro_batch_size=(1, 2), recompute=(None, "full"))
    pooled = search.plan(model, base, cluster, space, jobs=2, simulate_at_least=4, max_simulate=40)
    assert [(r["layout"], r.get("step_time"), r.get("bound")) for r in pooled.rows] == \
        [(r["layout"], r.get("step_time"), r.get("bound")) for r in res.rows]


def test_the_default_space_tries_every_cp_that_splits_the_sequence_and_every_zero_stage():
    model = model_preset("llama3-8b", num_layers=8, seq_length=24)  # 2 x cp | 24 and tp | 24 / cp
    cands = search.candidates(model, TrainingConfig(global_batch_size=16), 16, 8, search.SearchSpace())
    assert search.cp_sizes(model, 16, 1) == [1, 2, 4] and search.cp_sizes(model, 16, 4) == [1, 2]
    assert search.cp_sizes(model, 16, 8) == [1]  # 24 / 2 = 12 tokens do not split over 8 TP ranks
    assert {(c.tp, c.cp) for c in cands} == {(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (4, 1), (4, 2),
                                             (8, 1)}
    assert {c.zero for c in cands} == {0, 1, 2, 3}
    assert all(c.pp == 1 for c in cands if c.zero == 3)  # ZeRO-3 is not combined with pipeline parallelism
    assert all(c.zero == 0 for c in cands if 16 // (c.tp * c.pp) == 1)  # nothing to shard over


def test_each_bound_is_below_the_next_and_the_step():
    """compute bound <= schedule bound <= simulated step, for every layout of a small space (cp and ZeRO-3 too)."""
    cluster = build_cluster("hgx-h100", nodes=2)
    model = model_preset("llama3-8b", num_layers=4, seq_length=4096)
    base = TrainingConfig(global_batch_size=8)
    space = search.SearchSpace(tp=(2, 4), micro_batch_size=(1,), recompute=(None, "full"), max_virtual=2)
    search._init(cluster, model, base)
    simulated = set()
    for c in search.candidates(model, base, 16, 8, space):
        row = search.screen(c)
        if "bound" not in row:
            continue
        full = search.bound(c)["bound"]
        assert row["bound_kind"] == "compute" and row["bound"] <= full, c.label
        kind = (c.schedule, c.zero, c.cp > 1)
        if kind not in simulated:  # one simulated step of each kind
            simulated.add(kind)
            assert full <= search.simulate(c)["step_time"] * (1 + 1e-9), c.label
    assert {k[0] for k in simulated} == {"1f1b", "gpipe", "interleaved_1f1b"}
    assert {k[1] for k in simulated} == {0, 1, 2, 3} and {k[2] for k in simulated} == {False, True}


def test_a_1f1b_compute_bound_is_the_schedule_makespan_of_uniform_passes():
    layout = SimpleNamespace(dims=SimpleNamespace(pp=4), chunks=1, microbatches=8)
    assert search.compute_bound(layout, lambda r, c, ph: 1.0 if ph == "F" else 2.0, 0.5) == (8 + 4 - 1) * 3 + 0.5


def test_a_plan_on_ray_is_the_local_plan(planned, fake_ray):
    """simcomm plan --ray: the same layouts, bounds and step times as local workers (the Ray stand-in runs the
    tasks on fresh worker processes, each set up once with the cluster and the model)."""
    cluster, model, base, res = planned
    space = search.SearchSpace(micro_batch_size=(1, 2), recompute=(None, "full"))
    on_ray = search.plan(model, base, cluster, space, simulate_at_least=4, max_simulate=40, ray=True,
                         ray_address="ray://head:10001")
    assert [(r["layout"], r.get("step_time"), r.get("bound")) for r in on_ray.rows] == \
        [(r["layout"], r.get("step_time"), r.get("bound")) for r in res.rows]
    assert fake_ray.inits[0]["address"] == "ray://head:10001" and fake_ray.tasks > 2


def test_a_plan_on_ray_without_ray(monkeypatch):
    import sys

    from simcomm.errors import SimcommError
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SimcommError, match="running a plan on Ray needs the ray extra"):
        search.plan(model_preset("llama3-8b", num_layers=8), TrainingConfig(global_batch_size=16),
                    build_cluster("hgx-h100"), ray=True)
