"""Layout search: every valid layout enumerated, memory checked, bounded below, the best simulated and proven."""
import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import TrainingConfig, model_preset
from simcomm.parallel import search
from simcomm.parallel.step import StepModel


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
    layout = build_layout(model, cand.config(base, model.num_layers // cand.pp), cluster.num_ranks)
    assert StepModel(layout, cluster).run().step_time == pytest.approx(best["step_time"], rel=1e-12)


def test_parallel_workers_give_the_same_plan(planned):
    cluster, model, base, res = planned
    space = search.SearchSpace(micro_batch_size=(1, 2), recompute=(None, "full"))
    pooled = search.plan(model, base, cluster, space, jobs=2, simulate_at_least=4, max_simulate=40)
    assert [(r["layout"], r.get("step_time"), r.get("bound")) for r in pooled.rows] == \
        [(r["layout"], r.get("step_time"), r.get("bound")) for r in res.rows]
