"""The step model: the pipeline laws with free communication, a breakdown that adds up, overlaps that hide
communication, context parallelism on the right groups, FP8, ZeRO-2's per-micro-batch reduce-scatters, memory
checks, determinism, and the records a trace is drawn from."""
import pytest

from simcomm.errors import OutOfMemoryError
from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.layer_timing import PROGRAMS, TemplateRunner
from simcomm.parallel.pipeline_parallel.schedules import FORWARD, makespan, timeline
from simcomm.parallel.step_cost import optimizer_seconds

WIDE = model_preset("gpt3-13b", num_layers=24, padded_vocab_size=256)  # the layers dominate every stage


def step(model=WIDE, nodes=1, preset="hgx-h100", **kw):
    cluster = build_cluster(preset, nodes=nodes)
    kw.setdefault("memory_reserved", 0)
    sim = StepModel(build_layout(model, TrainingConfig(**kw), cluster.num_ranks), cluster)
    return sim, sim.run()


def pipeline_share(res):
    b = res.breakdown
    return b["bubble"] / (b["forward"] + b["backward"] + b["recompute"] + b["bubble"])


@pytest.mark.parametrize("pp,m", [(2, 8), (4, 8), (4, 16), (8, 8)])
def test_1f1b_bubble_with_free_communication(pp, m):
    _, res = step(global_batch_size=m * 8 // pp, pipeline_model_parallel_size=pp, ideal_network=True)
    assert pipeline_share(res) == pytest.approx((pp - 1) / (m + pp - 1), rel=0.03)


@pytest.mark.parametrize("pp,m,v", [(4, 8, 2), (4, 8, 3), (2, 8, 4)])
def test_interleaving_divides_the_bubble_by_v(pp, m, v):
    _, res = step(global_batch_size=m * 8 // pp, pipeline_model_parallel_size=pp, ideal_network=True,
                  num_layers_per_virtual_pipeline_stage=24 // pp // v)
    bubble = (pp - 1) / v
    assert pipeline_share(res) == pytest.approx(bubble / (m + bubble), rel=0.06)


@pytest.mark.parametrize("schedule,v", [("1f1b", None), ("gpipe", None), ("auto", 2)])
def test_the_pipeline_is_the_schedules_timeline_of_its_passes(schedule, v):
    """With free communication (and, interleaved, asynchronous p2p: Megatron's blocking interleaved schedule sends
    a steady iteration's forward output only after its backward) the step is the schedule's dependency timeline."""
    sim, res = step(global_batch_size=16, pipeline_model_parallel_size=4, ideal_network=True,
                    pipeline_schedule=schedule, num_layers_per_virtual_pipeline_stage=v, overlap_p2p_comm=v is not None)
    layout = sim.layout
    times = timeline(layout.schedule, lambda r, a: sim.passes[(r, a.chunk, "F" if a.phase == FORWARD else
                                                                "B")].duration)
    optimizer = max(optimizer_seconds(layout, r, sim.cm) for r in range(4))
    assert res.step_time - optimizer == pytest.approx(makespan(times), rel=1e-9)


def test_a_full_step_adds_up_and_reports_its_metrics():
    sim, res = step(model_preset("llama3-8b"), nodes=2, global_batch_size=32, tensor_model_parallel_size=4,
                    pipeline_model_parallel_size=2, sequence_parallel=True, use_distributed_optimizer=True,
                    overlap_grad_reduce=True, overlap_param_gather=True, memory_reserved=2 << 30)
    for stage in res.stages:
        assert sum(stage.values()) == pytest.approx(res.step_time, rel=1e-9)
    b = res.breakdown
    assert b["forward"] > 0 and b["backward"] > 1.8 * b["forward"] and b["tp"] > 0 and b["pp"] > 0
    assert res.mfu == pytest.approx(res.model_flops / (res.step_time * 16 * 989.4e12))
    assert res.hfu == res.mfu and 0.2 < res.mfu < 0.7
    assert res.tokens_per_second == pytest.approx(32 * 8192 / res.step_time)
    d = res.as_dict()
    assert {"step_time", "tflops_per_gpu", "mfu", "hfu", "tokens_per_second", "memory", "breakdown"} <= set(d)
    assert d["memory"]["fits"] and d["memory"]["peak"] == max(m.peak for m in res.memory)


def test_overlaps_hide_communication():
    base = dict(model=model_preset("llama3-8b"), nodes=2, global_batch_size=32, tensor_model_parallel_size=8,
                sequence_parallel=True, use_distributed_optimizer=True)
    _, plain = step(**base)
    _, tp = step(**base, tp_comm_overlap=True)
    _, dp = step(**base, overlap_grad_reduce=True, overlap_param_gather=True)
    _, free = step(**base, ideal_network=True)
    assert tp.breakdown["tp"] < 0.5 * plain.breakdown["tp"]
    assert dp.breakdown["dp"] < 0.5 * plain.breakdown["dp"]
    assert free.step_time < min(tp.step_time, dp.step_time) < plain.step_time
    assert free.breakdown["tp"] == free.breakdown["dp"] == 0.0


def test_recompute_costs_compute_and_saves_memory():
    base = dict(global_batch_size=8, pipeline_model_parallel_size=2)
    _, none = step(**base)
    _, full = step(**base, recompute_granularity="full")
    assert full.breakdown["recompute"] == pytest.approx(none.breakdown["forward"], rel=0.05)
    assert full.hfu > full.mfu and full.peak_memory < none.peak_memory


def test_zero3_gathers_every_layer_every_pass():
    sim, res = step(model_preset("gpt3-1.3b"), global_batch_size=16, zero_stage=3, micro_batch_size=2)
    gathers = [a for a in res.simulation.recorder.activities() if a.kind == "collective" and a.rank == 0
               and a.tags.get("phase") == "param_gather"]
    # the one micro-batch per replica: the decoder layers for forward and backward, the embedding and final norm
    # (Megatron-FSDP's root, kept from forward to backward) once
    assert len(gathers) == 24 * 2 + 2
    assert res.breakdown["dp"] > 0


def test_out_of_memory_stops_the_step():
    with pytest.raises(OutOfMemoryError, match="GPU 0 .*80 GiB"):
        step(model_preset("llama3-70b"), global_batch_size=8, tensor_model_parallel_size=8)


def test_same_inputs_same_step():
    kw = dict(model=model_preset("llama3-8b"), nodes=2, global_batch_size=16, tensor_model_parallel_size=4,
              pipeline_model_parallel_size=2, sequence_parallel=True, overlap_grad_reduce=True)
    (_, a), (_, b) = step(**kw), step(**kw)
    assert a.as_dict() == b.as_dict()


def test_records_carry_stage_microbatch_layer_and_axis():
    sim, res = step(model_preset("llama3-8b"), nodes=2, global_batch_size=16, tensor_model_parallel_size=4,
                    pipeline_model_parallel_size=2, sequence_parallel=True)
    acts = res.simulation.recorder.activities()
    layers = [a for a in acts if a.kind == "compute" and "layer" in a.tags]
    assert {a.tags["stage"] for a in layers} == {0, 1}
    assert {a.tags["layer"] for a in layers if a.tags["stage"] == 1} >= set(range(16, 32))
    assert {a.tags["phase"] for a in layers} == {"forward", "backward"}
    tp = [a for a in acts if a.tags.get("axis") == "tp"]
    assert tp and all(a.kind == "collective" and a.tags["collective"] in ("all_gather", "reduce_scatter",
                                                                           "all_reduce") for a in tp)
    assert any(a.tags.get("axis") == "pp" and a.kind == "p2p" for a in acts)
    assert all(a.end <= res.step_time + 1e-12 for a in acts)


SMALL = model_preset("llama3-8b", num_layers=4)


def test_context_parallel_rings_run_on_the_cp_groups_and_gradients_over_dp_x_cp():
    sim, res = step(SMALL, nodes=2, global_batch_size=4, tensor_model_parallel_size=4, context_parallel_size=2,
                    sequence_parallel=True, use_distributed_optimizer=True, overlap_grad_reduce=True)
    dims = sim.dims
    assert (dims.tp, dims.cp, dims.dp) == (4, 2, 2)
    replica = dims.ranks(pp=0, dp=0)  # (cp, tp)
    assert res.breakdown["cp"] >= 0 and res.step_time > 0
    acts = res.simulation.recorder.activities()
    cp = [a for a in acts if a.tags.get("axis") == "cp"]
    # every GPU of the replica passes K,V around its ring in forward and backward
    assert {a.rank for a in cp} == set(replica.reshape(-1).tolist())
    assert {a.tags["phase"] for a in cp} == {"forward", "backward"} and all(a.kind == "p2p" for a in cp)
    # the layer's ring: each TP rank sends to the same TP rank of the next CP rank
    runner = TemplateRunner(sim.cluster, sim.cm, replica, "bfloat16")
    runner.run("layer.forward", PROGRAMS["layer.forward"](sim.shape))
    sends = {(a.rank, a.peer) for a in runner.session.sim.recorder.activities() if a.kind == "p2p"}
    ring = {(int(replica[c, t]), int(replica[(c + 1) % 2, t])) for c in range(2) for t in range(4)}
    assert sends == ring
    # weight gradients are reduced over dp x cp (Megatron widens the data-parallel group by CP)
    reduce = {a.rank for a in acts if a.kind == "collective" and a.tags.get("phase") == "grad_reduce"}
    groups = [set(dims.ranks(pp=0, tp=t).reshape(-1).tolist()) for t in range(4)]
    touched = [g for g in groups if g & reduce]
    assert touched and all(g <= reduce for g in touched) and reduce == set().union(*touched)


def test_fp8_gemms_are_faster_than_bf16_all_else_equal():
    kw = dict(model=SMALL, global_batch_size=8, tensor_model_parallel_size=8, sequence_parallel=True)
    sim16, bf16 = step(**kw)
    sim8, fp8 = step(**kw, fp8_format="hybrid")
    assert sim8.cm.gemm(8192, 4096, 4096) < sim16.cm.gemm(8192, 4096, 4096) / 1.5
    # forward and backward passes speed up, by less than the GEMMs (attention and memory-bound ops stay bf16)
    for phase in ("forward", "backward"):
        ratio = bf16.breakdown[phase] / fp8.breakdown[phase]
        assert 1.05 < ratio < sim16.cm.gemm(8192, 4096, 4096) / sim8.cm.gemm(8192, 4096, 4096), phase
    assert fp8.step_time < bf16.step_time and fp8.peak_memory > bf16.peak_memory  # FP8 weight copies
    assert fp8.model_flops == bf16.model_flops


def test_a_bf16_false_step_costs_what_fp32_and_tf32_measure():
    # one GPU of the measured Llama block's shape, so the step is its layers' kernels (calibration.BLOCK_MS: the
    # block runs 13.6x bf16's time in fp32, 3.7x with TF32, 1.03x in fp16)
    llama = model_preset("llama3-8b", num_layers=4, padded_vocab_size=256, seq_length=4096)
    kw = dict(model=llama, preset="hgx-h100", global_batch_size=1, world_size=1, ideal_network=True)
    sims, res = {}, {}
    for name, flags in {"bf16": {}, "fp16": dict(bf16=False, fp16=True), "tf32": dict(bf16=False),
                        "fp32": dict(bf16=False, tf32=False)}.items():
        sims[name], res[name] = step(**kw, **flags)
        assert sims[name].cm.precision == name
    passes = {k: r.breakdown["forward"] + r.breakdown["backward"] for k, r in res.items()}
    assert 12 < passes["fp32"] / passes["bf16"] < 17
    assert 2.5 < passes["tf32"] / passes["bf16"] < 4
    assert 1.0 <= passes["fp16"] / passes["bf16"] < 1.06
    assert not sims["fp32"].shape.flash and sims["bf16"].shape.flash  # fp32 has no flash kernel: unfused
    assert res["fp32"].model_flops == res["bf16"].model_flops and res["fp32"].peak_memory > res["bf16"].peak_memory


def test_overlapping_p2p_hides_pipeline_sends():
    kw = dict(model=SMALL, nodes=2, global_batch_size=8, tensor_model_parallel_size=4,
              pipeline_model_parallel_size=4, sequence_parallel=True)
    _, blocking = step(**kw)
    _, overlapped = step(**kw, overlap_p2p_comm=True)
    assert blocking.breakdown["pp"] > 0
    assert overlapped.breakdown["pp"] < 0.5 * blocking.breakdown["pp"]
    assert overlapped.step_time < blocking.step_time


def test_zero2_reduce_scatters_every_microbatch():
    kw = dict(model=SMALL, nodes=2, global_batch_size=16, tensor_model_parallel_size=8,
              use_distributed_optimizer=True, overlap_grad_reduce=True)
    counts = {}
    for zero in (1, 2):
        sim, res = step(**kw, zero_stage=zero)
        ops = [a for a in res.simulation.recorder.activities() if a.kind == "collective" and a.rank == 0
               and a.tags.get("phase") == "grad_reduce"]
        assert {a.tags["collective"] for a in ops} == {"reduce_scatter"}
        counts[zero] = len(ops)
    assert sim.layout.microbatches == 8 and counts[2] == 8 * counts[1]
