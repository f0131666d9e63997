"""Numeric training charges each kernel the step model's time for it (one layer description, one ComputeModel):
the same layer costs the same compute time on both paths."""
import pytest

import simcomm
from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.numeric_training import train

MODEL = TransformerConfig(num_layers=2, hidden_size=256, num_attention_heads=4, seq_length=128,
                          padded_vocab_size=512, attention_dropout=0.0, hidden_dropout=0.0)


@pytest.mark.parametrize("kw", [{}, dict(tensor_model_parallel_size=2, sequence_parallel=True),
                                dict(context_parallel_size=2, recompute_granularity="full"),
                                dict(tensor_model_parallel_size=2, recompute_granularity="selective",
                                     use_flash_attn=False),
                                dict(bf16=False, tf32=False)])  # fp32: its own rates, unfused attention
def test_a_step_computes_as_long_on_both_paths(kw):
    """(Without compute/communication interference: it slows kernels by what runs beside them, which differs
    between the two paths' timelines.)"""
    config = TrainingConfig(global_batch_size=2, micro_batch_size=1, size_only=True, params_dtype="bf16", **kw)
    world = kw.get("tensor_model_parallel_size", 1) * kw.get("context_parallel_size", 1)
    assert_both_paths_compute_alike(MODEL, config, world)


def assert_both_paths_compute_alike(model, config, world):
    """Rank 0's compute in a numeric (size-only) run equals the step model's kernels, forward to recompute."""
    cluster = build_cluster("hgx-h100", tuning_changes={"interference": False})
    numeric = simcomm.spawn(train, args=(build_layout(model, config, world),), nprocs=world, cluster=cluster)
    computed = sum(a.end - a.start for a in numeric.timeline if a.kind == "compute" and a.rank == 0)
    step = StepModel(build_layout(model, config.replace(world_size=world), cluster.num_ranks), cluster).run()
    kernels = sum(step.breakdown[k] for k in ("forward", "backward", "recompute"))
    assert computed == pytest.approx(kernels, rel=1e-9)


MOE = MODEL.with_overrides(add_bias_linear=False, num_moe_experts=4, moe_ffn_hidden_size=512, moe_router_topk=2,
                           moe_shared_expert_intermediate_size=256, moe_layer_freq=[0, 1])


@pytest.mark.parametrize("kw", [dict(dp=2, expert_model_parallel_size=2),
                                dict(dp=2, expert_model_parallel_size=2, moe_routing_skew=1.5, moe_grouped_gemm=True),
                                dict(tensor_model_parallel_size=2, sequence_parallel=True, moe_grouped_gemm=True),
                                dict(dp=2, expert_model_parallel_size=2, expert_tensor_parallel_size=1,
                                     tensor_model_parallel_size=2, sequence_parallel=True)])
def test_an_moe_step_computes_as_long_on_both_paths(kw):
    """MoE layers: the router, the permutation and sorts, the expert GEMMs at the routing's rows (rank 0 holds
    the hottest experts: the busiest rank, which the step model times) and the shared expert."""
    kw = dict(kw)
    dp = kw.pop("dp", 1)
    config = TrainingConfig(global_batch_size=2 * dp, micro_batch_size=1, size_only=True, params_dtype="bf16", **kw)
    assert_both_paths_compute_alike(MOE, config, dp * kw.get("tensor_model_parallel_size", 1))
