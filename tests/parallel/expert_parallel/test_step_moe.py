"""MoE layers in the step model: the all-to-all bytes, the expert GEMMs, what imbalance costs, the scenarios'
layouts."""
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.compute_model import ComputeModel
from simcomm.parallel.model import programs
from simcomm.parallel.model.flops import megatron_flops_per_token, parameter_count
from simcomm.parallel.model.moe.ops import expert_routing

MIXTRAL = model_preset("mixtral-8x7b", num_layers=4)


def layout(model=MIXTRAL, world=16, **kw):
    kw = {"global_batch_size": 32, "micro_batch_size": 1, "bf16": True, **kw}
    return build_layout(model, TrainingConfig(**kw), world)


def comms(steps, axis):
    return [c for st_ in steps for c in st_.comm if c.axis == axis]


@pytest.mark.parametrize("skew", [0.0, 1.2])
def test_all_to_all_bytes_per_moe_layer_equal_the_formula(skew):
    """Dispatch: every rank sends the rows it routed to EP rank j's experts, h x 2 bytes each; the busiest rank
    gets ep times its share back in the combine; the backward moves the same bytes the other way."""
    lay = layout(expert_model_parallel_size=8, moe_routing_skew=skew)
    shape = lay.moe_layer_shape
    c, ep = lay.model, 8
    tokens = shape.sp_tokens  # 4096 tokens of one micro-batch, no TP or CP
    routed = np.asarray(expert_routing(tokens, c, ep, 1, shape.routing).routed)
    assert routed.sum() == tokens * c.moe_router_topk
    per_rank = routed.reshape(ep, -1).sum(axis=1) * c.hidden_size * 2
    forward = comms(programs.layer_forward(shape), "ep")
    dispatch = next(x for x in forward if x.name == "moe.dispatch")
    combine = next(x for x in forward if x.name == "moe.combine")
    assert dispatch.per_peer == tuple(per_rank) and dispatch.nbytes == per_rank.sum() == tokens * 2 * 4096 * 2
    assert combine.back and combine.nbytes == ep * per_rank.max()
    backward = {x.name: x for x in comms(programs.layer_backward(shape), "ep")}
    assert backward["moe.combine.backward"].per_peer == dispatch.per_peer and not backward["moe.combine.backward"].back
    assert backward["moe.dispatch.backward"].back
    if skew:
        assert per_rank.max() > per_rank.min()


def test_balanced_expert_gemms_equal_a_dense_layer_of_the_same_active_size():
    """Balanced routing, EP 8, one expert per rank, top-2: each GPU's expert computes 2 x its tokens, so its FC1
    and FC2 are the dense MLP's GEMMs with twice the rows (the active size: k experts of width f)."""
    lay = layout(expert_model_parallel_size=8, moe_grouped_gemm=False)
    moe = {k.name: k for st_ in programs.layer_forward(lay.moe_layer_shape) for k in st_.compute}
    dense_shape = layout(model=MIXTRAL.with_overrides(num_moe_experts=None), micro_batch_size=2).layer_shape
    dense = {k.name: k for st_ in programs.layer_forward(dense_shape) for k in st_.compute}
    assert moe["moe.fc1[0]"].shape == dense["fc1"].shape and moe["moe.fc2[0]"].shape == dense["fc2"].shape
    cm = ComputeModel(build_cluster("hgx-h100").device, "bf16")
    assert cm.kernel(moe["moe.fc1[0]"]) == cm.kernel(dense["fc1"])
    assert moe["moe.fc1[0]"].flops + moe["moe.fc2[0]"].flops == dense["fc1"].flops + dense["fc2"].flops


def _step(skew=0.0, load=None):
    lay = layout(expert_model_parallel_size=8, moe_routing_skew=skew, moe_expert_load=load, moe_grouped_gemm=True,
                 global_batch_size=16)
    return StepModel(lay, build_cluster("hgx-h100", nodes=2)).run()


@settings(max_examples=6, deadline=None)
@given(st.floats(0.05, 3.0))
def test_imbalance_only_ever_slows_a_step(skew):
    balanced = _step()
    skewed = _step(skew)
    assert skewed.step_time > balanced.step_time
    assert skewed.breakdown["ep"] >= balanced.breakdown["ep"]


def test_a_measured_load_vector_is_an_input():
    even, hot = _step(load=[1] * 8), _step(load=[8, 1, 1, 1, 1, 1, 1, 1])
    assert even.step_time == pytest.approx(_step().step_time, rel=1e-12)
    assert hot.step_time > even.step_time


def test_moe_step_reports_expert_parallel_time_and_active_flops():
    r = _step()
    assert r.breakdown["ep"] > 0 and "ep" in r.as_dict()["breakdown"]
    c = MIXTRAL
    assert r.model_flops == pytest.approx(megatron_flops_per_token(c) * 16 * c.seq_length)
    # active parameters: 2 of 8 experts -> well under the 6 N of every parameter
    assert megatron_flops_per_token(c) < 0.5 * 6 * parameter_count(c)


def test_expert_memory_is_sharded_by_ep():
    one, eight = layout(), layout(expert_model_parallel_size=8)
    m1 = StepModel(one, build_cluster("hgx-h100", nodes=2), check_memory=False).memory()[0]
    m8 = StepModel(eight, build_cluster("hgx-h100", nodes=2), check_memory=False).memory()[0]
    assert m8.details["parameters_detail"]["experts"] == pytest.approx(m1.details["parameters_detail"]["experts"] / 8)
    assert m8.categories["weights"] < m1.categories["weights"]


@pytest.mark.parametrize("name,gflop", [("mixtral-8x7b", 79.7), ("mixtral-8x22b", 242.2), ("qwen3-30b-a3b", 23.0),
                                        ("deepseek-v3", 249.8)])
def test_megatron_flops_per_token_match_the_reference(name, gflop):
    """shared/reference/moe.md section 4: Megatron's count (causal core attention) at s = 4096, GFLOP per token."""
    assert megatron_flops_per_token(model_preset(name), causal=True) / 1e9 == pytest.approx(gflop, abs=0.05)


@pytest.mark.parametrize("name,total", [("mixtral-8x7b", 46.7), ("mixtral-8x22b", 140.6), ("qwen3-30b-a3b", 30.5),
                                        ("deepseek-v3", 671.0)])
def test_total_parameters_of_the_presets(name, total):
    """moe.md section 5 (DeepSeek-V3 without its 14B multi-token-prediction module)."""
    c = model_preset(name)
    assert parameter_count(c) / 1e9 == pytest.approx(total, abs=0.1)


def test_expert_gradients_are_reduced_over_the_expert_data_parallel_group():
    """Mixtral, EP 8 x PP 4 on 64 GPUs: attention's data parallel is 16 ranks, the experts' 2 -- their gradient
    collectives run on groups of 2 ranks that hold the same experts."""
    lay = layout(world=64, pipeline_model_parallel_size=4, expert_model_parallel_size=8, use_distributed_optimizer=True,
                 global_batch_size=64, model=model_preset("mixtral-8x7b", num_layers=8))
    r = StepModel(lay, build_cluster("hgx-h100", nodes=8)).run()
    ranks = {}
    for a in r.simulation.recorder.activities():
        if a.kind == "collective" and a.tags.get("phase") == "grad_reduce" and a.tags.get("bucket") == 0 and \
                a.tags.get("stage") == 0:
            ranks.setdefault(a.tags["axis"], set()).add(a.rank)
    assert ranks == {"dp": set(lay.dims.group_of(0, "dp").tolist()), "edp": set(lay.dims.group_of(0, "edp").tolist())}
    assert len(ranks["dp"]) == 16 and len(ranks["edp"]) == 2


def test_the_step_json_breaks_out_router_experts_exchanges_and_imbalance():
    balanced, skewed = _step().as_dict()["moe"], _step(1.0).as_dict()["moe"]
    for m in (balanced, skewed):
        mean = m["mean"]
        assert mean["router"] > 0 and mean["expert_compute"] > mean["router"]
        assert mean["dispatch_combine"] >= mean["dispatch_combine_exposed"] > 0
        assert mean["dispatch_combine_hidden"] == pytest.approx(mean["dispatch_combine"] -
                                                                mean["dispatch_combine_exposed"])
        assert m["expert_model_parallel_size"] == 8 and m["expert_data_parallel_size"] == 2
    assert balanced["mean"]["imbalance"] == 0 and balanced["routing"] == "balanced"
    assert skewed["mean"]["imbalance"] > 0 and len(skewed["routing"]) == 8
    # the busiest rank's experts: the skewed router's hottest expert computes more
    assert skewed["busiest_rank_expert_flops_per_microbatch"] > balanced["busiest_rank_expert_flops_per_microbatch"]


def test_capacity_caps_the_rows_an_expert_computes():
    """moe_expert_capacity_factor: each expert keeps at most ceil(T k / E x factor) rows (padded to it with
    moe_pad_expert_input_to_capacity), so a skewed router's busiest expert computes at most that."""
    capped = MIXTRAL.with_overrides(moe_expert_capacity_factor=1.0)
    padded = capped.with_overrides(moe_pad_expert_input_to_capacity=True)
    skew = tuple(float(x) for x in np.arange(8, 0, -1))
    cap = int(np.ceil(4096 * 2 / 8 * 1.0))
    assert max(expert_routing(4096, capped, 8, 1, skew).routed) == cap
    assert expert_routing(4096, padded, 8, 1, ()).routed == (cap,) * 8
    assert max(expert_routing(4096, MIXTRAL, 8, 1, skew).routed) > cap
