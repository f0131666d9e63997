"""What a pipeline step pays besides its kernels and bytes (pipeline_parallel/timing.py, step_cost.py), each
mechanism with its switch: the NCCL p2p rendezvous, Megatron's scatter/gather of pipeline sends, and the step's
small collectives over their real groups."""
from collections import Counter

import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.pipeline_parallel.schedules import FORWARD

MODEL = model_preset("gpt3-13b", num_layers=8, padded_vocab_size=256)


def step(model=MODEL, nodes=1, **kw):
    cluster = build_cluster("hgx-h100", nodes=nodes)
    kw.setdefault("memory_reserved", 0)
    sim = StepModel(build_layout(model, TrainingConfig(**kw), cluster.num_ranks), cluster)
    return sim, sim.run()


def pass_ends(res) -> dict:
    """(stage, phase, microbatch, chunk) -> when that pass's last kernel ended."""
    out: dict = {}
    for a in res.simulation.recorder.activities():
        if a.kind == "compute" and "layer" in a.tags:
            t = a.tags
            k = (t["stage"], "forward" if t["phase"] == "forward" else "backward", t["microbatch"], t["chunk"])
            out[k] = max(out.get(k, 0.0), a.end)
    return out


def sends_before_their_receive(sim, res) -> int:
    """Pipeline sends whose transfer started before the receiving stage had finished the pass before the one that
    receives it (1F1B posts a receive no earlier than that)."""
    layout, ends, early = sim.layout, pass_ends(res), 0
    pp = layout.dims.pp
    for a in res.simulation.recorder.activities():
        if a.kind != "p2p" or a.tags.get("axis") != "pp":
            continue
        t = a.tags
        dst = t["stage"] + (1 if t["phase"] == "forward" else -1)
        actions = layout.schedule[dst % pp]
        i = next(i for i, x in enumerate(actions) if x.microbatch == t["microbatch"]
                 and (x.phase == FORWARD) == (t["phase"] == "forward"))
        if i:
            prev = actions[i - 1]
            posted = ends[(dst, "forward" if prev.phase == FORWARD else "backward", prev.microbatch, prev.chunk)]
            early += a.start < posted - 1e-12
    return early


def test_a_send_waits_for_its_receive_to_be_posted():
    kw = dict(global_batch_size=32, pipeline_model_parallel_size=4)
    sim, on = step(**kw)
    assert sends_before_their_receive(sim, on) == 0
    sim_off, off = step(**kw, p2p_rendezvous=False)
    assert sends_before_their_receive(sim_off, off) > 0  # the law is not vacuous: without it sends start early
    for res in (on, off):
        for stage in res.stages:
            assert sum(stage.values()) == pytest.approx(res.step_time, rel=1e-9)


def test_the_interleaved_schedule_sends_a_steady_forward_after_its_backward():
    """Megatron's interleaved 1F1B exchanges once per steady iteration (forward then backward): the forward's
    output leaves after the backward, unless overlap_p2p_comm sends it at once."""
    kw = dict(global_batch_size=32, pipeline_model_parallel_size=2, num_layers_per_virtual_pipeline_stage=2,
              ideal_network=True)
    _, blocking = step(**kw)
    _, overlapped = step(**kw, overlap_p2p_comm=True)
    _, off = step(**kw, p2p_rendezvous=False)
    assert blocking.step_time > max(overlapped.step_time, off.step_time)


def pp_traffic(res):
    acts = res.simulation.recorder.activities()
    sends = [a for a in acts if a.kind == "p2p" and a.tags.get("axis") == "pp"]
    gathers = [a for a in acts if a.tags.get("phase") == "pp_gather"]
    return sends, gathers


def test_scatter_gather_sends_a_tp_share_and_gathers_it_over_tp():
    kw = dict(global_batch_size=16, tensor_model_parallel_size=4, pipeline_model_parallel_size=2)
    _, whole = step(**kw)
    _, split = step(**kw, scatter_gather_tensors_in_pipeline=True)
    (s_whole, g_whole), (s_split, g_split) = pp_traffic(whole), pp_traffic(split)
    assert not g_whole and len(s_split) == len(s_whole)
    assert {a.nbytes for a in s_split} == {a.nbytes / 4 for a in s_whole}
    assert {a.nbytes for a in g_split} == {s_whole[0].nbytes} and len(g_split) == len(s_split)
    assert {a.tags["collective"] for a in g_split} == {"all_gather"}
    # with sequence parallelism the activation is already split: nothing changes
    _, sp = step(**kw, sequence_parallel=True)
    _, sp_split = step(**kw, sequence_parallel=True, scatter_gather_tensors_in_pipeline=True)
    assert sp.as_dict() == sp_split.as_dict()


def phases(res, rank=0) -> Counter:
    return Counter(a.tags["phase"] for a in res.simulation.recorder.activities()
                   if a.kind == "collective" and a.rank == rank and a.tags.get("phase") in
                   ("grad_norm", "found_inf", "loss", "sp_norm_grads"))


def norm_group(res) -> set:
    return {a.rank for a in res.simulation.recorder.activities() if a.tags.get("phase") == "grad_norm"}


def test_the_optimizers_all_reduces_span_who_holds_the_gradients():
    kw = dict(global_batch_size=32, tensor_model_parallel_size=2, pipeline_model_parallel_size=2)
    sim, ddp = step(**kw)
    assert norm_group(ddp) == set(sim.layout.dims.ranks(dp=0).reshape(-1).tolist())  # the model-parallel group
    sim, dist = step(**kw, use_distributed_optimizer=True)
    assert norm_group(dist) == set(range(8))  # every DP rank holds a shard: the world
    _, fp16 = step(**kw, bf16=False, fp16=True)
    assert phases(fp16)["found_inf"] == 1 and phases(fp16)["grad_norm"] == 1


def test_the_last_stage_reduces_each_micro_batchs_loss_over_dp():
    sim, res = step(global_batch_size=16, pipeline_model_parallel_size=2)  # dp 4, 4 micro-batches
    last = int(sim.layout.dims.ranks(pp=1, dp=0, cp=0, tp=0))
    assert phases(res, last)["loss"] == sim.layout.microbatches == 4
    assert phases(res, 0)["loss"] == 0


def test_sequence_parallel_norm_gradients_are_summed_over_tp():
    sim, res = step(global_batch_size=16, tensor_model_parallel_size=4, sequence_parallel=True)
    norms = [a for a in res.simulation.recorder.activities() if a.tags.get("phase") == "sp_norm_grads"]
    assert {a.tags["axis"] for a in norms} == {"tp"} and {a.rank for a in norms} == {0, 1, 2, 3}
    per_layer = 2 * 2 * MODEL.hidden_size + (2 * MODEL.hidden_size if MODEL.add_bias_linear else 0)
    assert norms[0].nbytes == (8 * per_layer + 2 * MODEL.hidden_size) * 4  # LayerNorm, fp32 gradients


def test_step_collectives_off_is_one_all_reduce_over_the_replica():
    kw = dict(global_batch_size=32, tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
              sequence_parallel=True, use_distributed_optimizer=True)
    sim, on = step(**kw)
    _, off = step(**kw, step_collectives=False)
    assert phases(off, 0) == {"grad_norm": 1} and norm_group(off) == set(sim.layout.dims.ranks(dp=0).reshape(-1)
                                                                         .tolist())
    assert phases(on, 0)["sp_norm_grads"] == 1 and on.step_time > off.step_time


@pytest.mark.parametrize("pp,v,m", [(2, 1, 2), (2, 1, 5), (2, 1, 7), (4, 1, 4), (4, 1, 9), (2, 2, 2), (2, 2, 4),
                                    (2, 2, 6), (4, 2, 4), (4, 2, 8), (4, 2, 12), (2, 4, 8), (4, 2, 16), (8, 1, 3)])
@pytest.mark.parametrize("overlap", [False, True])
def test_the_rendezvous_never_deadlocks_a_schedule(pp, v, m, overlap):
    """Every schedule finishes with receives posted where Megatron posts them (a send waiting for a receive that
    is never posted would leave the pipeline unfinished), and its breakdown adds up."""
    if overlap and v == 1:
        return  # overlap_p2p_comm is the interleaved schedule's
    model = model_preset("gpt3-13b", num_layers=8 * pp // 2 if v == 1 else 8 * v * pp // 4, padded_vocab_size=256,
                         hidden_size=512, num_attention_heads=8)
    layers = model.num_layers // (pp * v)
    sim, res = step(model, global_batch_size=m * 8 // pp, pipeline_model_parallel_size=pp, ideal_network=True,
                    num_layers_per_virtual_pipeline_stage=layers if v > 1 else None, overlap_p2p_comm=overlap)
    assert sends_before_their_receive(sim, res) == 0 or v > 1
    for stage in res.stages:
        assert sum(stage.values()) == pytest.approx(res.step_time, rel=1e-9)
