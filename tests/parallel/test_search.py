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
    """compute bound <= passes bound <= schedule bound <= simulated step, for every layout of a small space (cp and
    ZeRO-3 too)."""
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
        passes, full = search.passes_bound(c), search.bound(c)["bound"]
        assert row["bound_kind"] == "compute" and row["bound"] <= passes["bound"] <= full, c.label
        kind = (c.schedule, c.zero, c.cp > 1)
        if kind not in simulated:  # one simulated step of each kind
            simulated.add(kind)
            assert full <= search.simulate(c)["step_time"] * (1 + 1e-9), c.label
    assert {k[0] for k in simulated} == set(search.SearchSpace().schedules)  # every schedule, ZB and DualPipe too
    assert {k[1] for k in simulated} == {0, 1, 2, 3} and {k[2] for k in simulated} == {False, True}


def test_a_1f1b_compute_bound_is_the_schedule_makespan_of_uniform_passes():
    layout = SimpleNamespace(dims=SimpleNamespace(pp=4), chunks=1, microbatches=8, schedule_name="1f1b",
                             placement=SimpleNamespace(style="loop"))
    assert search.compute_bound(layout, lambda r, c, ph: 1.0 if ph == "F" else 2.0, 0.5) == (8 + 4 - 1) * 3 + 0.5


def test_the_plan_ranks_the_configs_own_layout_and_each_row_without_interference():
    cluster = build_cluster("hgx-h100", nodes=2)
    model = model_preset("llama3-8b", num_layers=8)
    base = TrainingConfig(global_batch_size=16, tensor_model_parallel_size=4, pipeline_model_parallel_size=2,
                          sequence_parallel=True)
    space = search.SearchSpace(tp=(4, 8), micro_batch_size=(1,), recompute=(None,), schedules=("1f1b",))
    res = search.plan(model, base, cluster, space, jobs=1, simulate_at_least=2, max_simulate=4, own=True, alone=2)
    from simcomm.parallel import build_layout
    own = StepModel(build_layout(model, base, 16), cluster).run().step_time
    assert res.own["step_time"] == pytest.approx(own, rel=1e-12) and res.own["layout"].startswith("tp4 pp2")
    best = res.rows[0]
    cand = search.Candidate(best["tp"], best["pp"], best["cp"], best["mbs"], best["schedule"], best["v"],
                            best["zero"], None)
    alone = StepModel(build_layout(model, cand.config(base), 16), cluster, interference=False).run().step_time
    assert best["step_time_alone"] == pytest.approx(alone, rel=1e-12) and alone <= best["step_time"]
    assert sum("step_time_alone" in r for r in res.rows) == 2


def test_the_plan_lays_out_the_configs_world_size_only():
    cluster = build_cluster("hgx-h100", nodes=2)
    model = model_preset("llama3-8b", num_layers=8)
    base = TrainingConfig(global_batch_size=16, world_size=8)
    space = search.SearchSpace(micro_batch_size=(1,), recompute=(None,), schedules=("1f1b",), zero=(0,))
    res = search.plan(model, base, cluster, space, jobs=1, simulate_at_least=1, max_simulate=2)
    assert {r["tp"] * r["pp"] * r["cp"] * r["dp"] for r in res.rows if "dp" in r} == {8}
    with pytest.raises(search.ConfigError, match="world_size 32"):
        search.plan(model, TrainingConfig(global_batch_size=16, world_size=32), cluster, space, jobs=1)


def test_a_step_of_too_many_passes_is_refused_naming_the_batch():
    from simcomm.parallel import build_layout
    from simcomm.parallel.config import ConfigError
    with pytest.raises(ConfigError, match=r"global_batch_size \(100,000,000\) makes") as exc:
        build_layout(model_preset("llama3-8b", num_layers=8), TrainingConfig(global_batch_size=100_000_000), 16)
    assert exc.value.field == "global_batch_size"


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


def test_moe_layouts_enumerate_ep_and_etp_and_bounds_hold():
    """A mixture of experts: ep over the divisors of the experts that divide a stage's GPUs, etp 1 or tp; every
    bound below the next and the step; experts sharded by EP in the memory check."""
    cluster = build_cluster("hgx-h100", nodes=2)
    model = model_preset("mixtral-8x7b", num_layers=4, seq_length=2048)
    base = TrainingConfig(global_batch_size=8, moe_grouped_gemm=True)
    space = search.SearchSpace(tp=(1, 2), pp=(1, 2), micro_batch_size=(1,), schedules=("1f1b",), zero=(1,),
                               recompute=(None,))
    cands = search.candidates(model, base, 16, 8, space)
    assert {(c.tp, c.pp, c.ep, c.etp) for c in cands if c.tp == 2 and c.pp == 2} == \
        {(2, 2, e, t) for e in (1, 2, 4, 8) for t in (1, None)} - {(2, 2, 8, None)}  # 8 x 2 > 8 GPUs a stage
    assert not any(c.zero == 3 for c in search.candidates(model, base, 16, 8, search.SearchSpace(pp=(1,))))
    search._init(cluster, model, base)
    peaks = {}
    for c in cands:
        row = search.screen(c)
        peaks[c.label] = row.get("peak_memory")
        if "bound" in row and c.tp == 1 and c.pp == 2 and c.ep in (1, 8):
            full = search.bound(c)["bound"]
            assert row["bound"] <= full <= search.simulate(c)["step_time"] * (1 + 1e-9), c.label
    assert peaks["tp1 pp2 cp1 ep8 mbs1 1F1B zero1 none"] < peaks["tp1 pp2 cp1 mbs1 1F1B zero1 none"]
