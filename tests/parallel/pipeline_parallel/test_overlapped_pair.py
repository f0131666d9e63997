"""DualPipe's overlapped forward-and-backward pair: the laws of its two-stream interleaving, and what it does to an
MoE step (the all-to-alls of one pass beside the other's compute)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.pipeline_parallel.overlapped_pair import Block, overlap_pair

blocks = st.lists(st.tuples(st.booleans(), st.floats(0.0, 5.0)), min_size=1, max_size=12)


def _chain(spec, factor=1.0):
    out, at = [], 0.0
    for comm, secs in spec:
        out.append(Block(comm, secs, at, factor))
        at += secs
    return out


@settings(max_examples=200, deadline=None)
@given(blocks, blocks)
def test_a_pair_without_interference_is_never_longer_than_its_passes_in_turn(a, b):
    """At every instant one stream is busy, so the pair takes at most the two passes one after the other, at least
    each chain alone, each stream's total work, and the compute stream waits only while an exchange runs."""
    ca, cb = _chain(a), _chain(b)
    t = overlap_pair(ca, cb)
    total = sum(x.seconds for x in ca + cb)
    compute = sum(x.seconds for x in ca + cb if not x.comm)
    comm = total - compute
    assert t.duration <= total * (1 + 1e-12) + 1e-12
    assert t.duration >= max(compute, comm, sum(x.seconds for x in ca), sum(x.seconds for x in cb)) * (1 - 1e-12)
    assert t.slowed == 0.0
    assert t.idle == pytest.approx(t.duration - compute, abs=1e-9)


def test_kernels_beside_an_exchange_slow_by_their_factor():
    """Chain A's exchange (3 s) beside chain B's kernels (2 s alone, 1.5x slower beside it): B's kernels take 3 s,
    1 s of it interference."""
    t = overlap_pair(_chain([(True, 3.0)]), _chain([(False, 2.0)], factor=1.5))
    assert t.duration == pytest.approx(3.0) and t.slowed == pytest.approx(1.0) and t.idle == pytest.approx(0.0)


def test_the_pair_alternates_the_two_passes_kernels():
    """Attention of one beside the dispatch of the other: F = attention, dispatch, experts; B = its mirror. The
    exchanges hide: the pair is its compute, the sequential pair its compute plus both exchanges."""
    f = _chain([(False, 1.0), (True, 1.0), (False, 1.0)])
    b = _chain([(False, 1.0), (True, 1.0), (False, 1.0)])
    t = overlap_pair(f, b)
    assert t.duration == pytest.approx(4.0) and t.idle == pytest.approx(0.0)
    xs, ys = t.maps[1]
    assert ys.min() == pytest.approx(1.0)  # B's first kernels start once F's are through


MOE = model_preset("mixtral-8x7b", num_layers=8)


def _step(interference=False, **kw):
    cfg = TrainingConfig(global_batch_size=64, micro_batch_size=1, bf16=True, pipeline_model_parallel_size=2,
                         expert_model_parallel_size=8, moe_grouped_gemm=True, pipeline_schedule="dualpipe", **kw)
    layout = build_layout(MOE, cfg, 16)
    return StepModel(layout, build_cluster("hgx-h100", nodes=2), interference=interference,
                     check_memory=False).run()


def test_overlapped_pairs_hide_the_all_to_alls_and_never_slow_a_step_without_interference():
    together, apart = _step(), _step(overlap_moe_expert_parallel_comm=False)
    assert together.step_time < apart.step_time
    assert together.breakdown["ep"] < 0.8 * apart.breakdown["ep"]
    for name in ("forward", "backward"):
        assert together.breakdown[name] == pytest.approx(apart.breakdown[name], rel=1e-12)
    for stage in together.stages:
        assert sum(stage.values()) == pytest.approx(together.step_time, rel=1e-9)


def test_the_exchanges_sms_slow_the_kernels_beside_them():
    """With interference the pair's kernels lose the SMs the other pass's exchanges hold (NCCL's channels here;
    DeepEP's moe_deepep_num_sms with the flex dispatcher): more interference than the passes in turn."""
    together, apart = _step(True), _step(True, overlap_moe_expert_parallel_comm=False)
    assert together.breakdown["interference"] > apart.breakdown["interference"]
    assert together.step_time < apart.step_time


def test_the_trace_places_a_pairs_passes_where_they_ran_together():
    res = _step()
    layers = [a for a in res.simulation.recorder.activities() if a.kind == "compute" and
              a.tags.get("annotation") == "layer" and a.rank == 0]
    by_pass: dict = {}
    for a in layers:
        key = (a.tags["phase"] == "forward", a.tags["microbatch"], a.tags["chunk"])
        lo, hi = by_pass.get(key, (a.start, a.end))
        by_pass[key] = (min(lo, a.start), max(hi, a.end))
    spans = sorted(by_pass.values())
    assert any(b[0] < a[1] - 1e-9 for a, b in zip(spans, spans[1:])), "no two passes overlap in time"


def test_a_dense_model_runs_its_pairs_as_before():
    dense = model_preset("llama3-8b", num_layers=4)
    cfg = dict(global_batch_size=16, micro_batch_size=1, bf16=True, pipeline_model_parallel_size=2,
               pipeline_schedule="dualpipe")
    runs = [StepModel(build_layout(dense, TrainingConfig(**cfg, overlap_moe_expert_parallel_comm=on), 8),
                      build_cluster("hgx-h100"), check_memory=False).run().step_time for on in (True, False)]
    assert runs[0] == runs[1]


def test_the_step_json_reports_what_the_pairs_left_exposed():
    res = _step()
    moe = res.as_dict()["moe"]
    assert moe["mean"]["dispatch_combine_exposed"] == pytest.approx(res.breakdown["ep"], rel=1e-9)
    assert moe["mean"]["dispatch_combine_hidden"] > 0


def test_the_layout_searchs_schedule_bound_stays_below_the_step():
    """simcomm plan's schedule bound runs an interleaved pair as one action of at least its longer chain, its
    kernels and its exchanges (pair_bound): never above the simulated step, with and without interference."""
    from simcomm.parallel.pipeline_parallel.pair_timing import timed_schedule
    from simcomm.parallel.pipeline_parallel.timeline import makespan, timeline
    cfg = TrainingConfig(global_batch_size=64, micro_batch_size=1, bf16=True, pipeline_model_parallel_size=2,
                         expert_model_parallel_size=8, moe_grouped_gemm=True, pipeline_schedule="dualpipe")
    layout = build_layout(MOE, cfg, 16)
    for interference in (False, True):
        sim = StepModel(layout, build_cluster("hgx-h100", nodes=2), interference=interference, check_memory=False)
        step = sim.run().step_time
        times = timeline(*timed_schedule(layout, sim.passes), placement=layout.placement)
        assert makespan(times) <= step
        flat = [[x for a in acts for x in getattr(a, "parts", (a,))] for acts in layout.schedule]
        apart = timeline(flat, lambda r, a: sim.passes[(r, a.chunk, a.phase)].duration, placement=layout.placement)
        assert makespan(times) < makespan(apart)  # below the passes in turn, which are no bound any more
