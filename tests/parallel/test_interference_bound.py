"""The layout search's bounds past the schedule's makespan: the data-parallel stream's end (dp_stream.py) and the
interference-aware bound, never above the simulated step (interference on); each above the makespan where its
mechanism costs time (the gradients reduced after the last backward; data-parallel communication beside the
compute); and the cheapest-fill law."""
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcomm.errors import SimcommError
from simcomm.hardware import build_cluster
from simcomm.parallel import TrainingConfig, build_layout, model_preset
from simcomm.parallel import search
from simcomm.parallel.dp_stream import stream_bound
from simcomm.parallel.interference_bound import _extra, interference_bound
from simcomm.parallel.pipeline_parallel.actions import has_pairs
from simcomm.parallel.pipeline_parallel.pair_timing import timed_schedule
from simcomm.parallel.pipeline_parallel.timeline import makespan, timeline
from simcomm.parallel.step_cost import StepModel, optimizer_seconds

CLUSTER = build_cluster("hgx-h100", nodes=2)
MODEL = model_preset("llama3-8b", num_layers=4, seq_length=4096)
SPACE = search.SearchSpace(micro_batch_size=(1, 2), recompute=(None, "selective", "full"), max_virtual=2)


def _layouts(framework):
    base = TrainingConfig(global_batch_size=16, **({"framework": framework} if framework else {}))
    space = search.SearchSpace(**{**SPACE.__dict__, "framework": framework})
    out = []
    for c in search.candidates(MODEL, base, 16, 8, space):
        try:
            out.append(build_layout(MODEL, c.config(base), 16))
        except SimcommError:
            continue
    return out


LAYOUTS = [x for f in (None, "deepspeed", "torchtitan") for x in _layouts(f)]  # DeepSpeed: ZeRO-3 per module


def _bounds(layout):
    """(the real passes' critical path; the schedule's makespan: data dependencies alone, and with the step's p2p
    rules; the data-parallel stream's end; the interference bound), each plus the optimizer, as search.passes_bound,
    search.bound and search.slowed_bound take them; and the step model."""
    sim = StepModel(layout, CLUSTER, check_memory=False)
    passes = sim.build_passes()
    search._init(CLUSTER, MODEL, layout.config)  # the pipeline sends' times alone (search.send_bound), cached there
    comm = search.send_bound(layout, sim)
    span = makespan(timeline(*timed_schedule(layout, passes), comm=comm, placement=layout.placement))
    spans = search.pipeline_bound(layout, passes, comm)  # p2p_timeline.py
    optimizer = max(optimizer_seconds(layout, r, sim.cm) for r in range(layout.dims.pp))
    seconds = search._pass_seconds(sim, real=True)  # the passes grade: the critical path of the real passes
    return SimpleNamespace(passes=search.compute_bound(layout, seconds, optimizer), span=span + optimizer, p2p=max(e for mine in spans for _s, e in mine) + optimizer,
                           ready=stream_bound(layout, passes, CLUSTER, {}, spans) + optimizer,
                           slowed=interference_bound(layout, passes, CLUSTER, {}, comm) + optimizer, sim=sim)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LAYOUTS))
def test_the_bounds_never_exceed_the_simulated_step(layout):
    assert CLUSTER.template.tuning.interference
    b = _bounds(layout)
    step = b.sim.run().step_time
    assert b.span <= b.p2p <= step and b.ready <= step and b.slowed <= step, layout.describe()
    if not has_pairs(layout.schedule):
        assert b.passes <= b.span * (1 + 1e-9), layout.describe()


def test_blocking_sends_and_their_rendezvous_raise_the_makespan():
    """GPipe's forwards each block their stage until the next one has posted its receive and the activation is
    through: the makespan with the step's p2p rules is above the one with the data dependencies alone."""
    base = TrainingConfig(global_batch_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=4,
                          sequence_parallel=True, pipeline_schedule="gpipe")
    b = _bounds(build_layout(MODEL, base, 16))
    assert b.span < b.p2p <= b.sim.run().step_time


def test_gradients_reduced_after_the_last_backward_raise_the_bound_above_the_makespan():
    """Without overlap_grad_reduce every bucket is all-reduced after the stage's last backward: the stream's end
    lifts the schedule bound above the makespan, and the step is above both."""
    base = TrainingConfig(global_batch_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                          sequence_parallel=True, overlap_grad_reduce=False)
    b = _bounds(build_layout(MODEL, base, 16))
    step = b.sim.run()
    assert b.p2p < b.ready <= step.step_time
    assert step.breakdown["dp"] > 0


def test_every_zero_stage_schedule_and_framework_is_drawn_from():
    assert {x.config.stage for x in LAYOUTS} == {0, 1, 2, 3}
    assert {x.schedule_name for x in LAYOUTS} == {"1f1b", "interleaved_1f1b", "gpipe"}
    assert any(x.config.framework == "deepspeed" and x.config.stage == 3 for x in LAYOUTS)


def test_gradients_reduced_beside_every_micro_batch_raise_the_bound_above_the_makespan():
    """ZeRO-2 reduce-scatters each micro-batch's gradients beside the next passes: the slowdown it must cause
    lifts the bound above the schedule's makespan, and the step is above both."""
    base = TrainingConfig(global_batch_size=16, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                          sequence_parallel=True, zero_stage=2, use_distributed_optimizer=True,
                          overlap_grad_reduce=True, overlap_param_gather=True)
    b = _bounds(build_layout(MODEL, base, 16))
    step = b.sim.run()
    assert b.span < b.slowed <= step.step_time
    assert step.breakdown["interference"] > 0


def test_a_pass_cut_inside_its_parts_holds_the_bound_too():
    """DeepSpeed's ZeRO-3 gathers each module's parameters where its kernels start, inside a layer's part: the
    engine runs such a pass as jobs that mix their parts' kernels, which the bound takes at their least slowdown."""
    base = TrainingConfig(global_batch_size=16, tensor_model_parallel_size=2, sequence_parallel=True, zero_stage=3,
                          use_distributed_optimizer=True, overlap_grad_reduce=True, framework="deepspeed")
    b = _bounds(build_layout(MODEL, base, 16))
    assert b.span < b.slowed <= b.sim.run().step_time


@pytest.mark.parametrize("overlap, items, extra", [
    (0.0, [(1.0, 2.0)], 0.0),
    (1.0, [(1.0, 2.0)], 0.5),  # 1 s beside a kernel slowed 2x: it ran 0.5 s of its work, 0.5 s added
    (3.0, [(1.0, 2.0)], 2.0),  # its 1 s alone fills 2 s; the third second is all added
    (1.0, [(1.0, 2.0), (0.5, 1.0)], 0.25),  # an idle wait (slowdown 1) fills 0.5 s for free, then the kernel
    (1.0, [(2.0, 1.25), (1.0, 2.0)], 0.2),  # the least slowed kernel first
])
def test_the_least_slowdown_fills_the_overlap_cheapest_first(overlap, items, extra):
    assert _extra(overlap, items) == pytest.approx(extra)
