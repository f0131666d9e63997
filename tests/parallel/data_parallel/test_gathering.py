"""ZeRO-3 / FSDP as the frameworks run it (data_parallel/gathering.py): the gathers per layer and step by use
(forward, recomputation, backward), prefetch depth (the memory it holds, the time it hides), reshard_after_forward,
DeepSpeed's per-module units, gradients reduced in the framework's dtype, and the configuration's names for it."""
from collections import Counter

import pytest

import simcomm
from simcomm.hardware import build_cluster
from simcomm.parallel import ConfigError, StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.data_parallel.gathering import Gathering, Use, gathering, layer_modules
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.model.memory import stage_parameters, zero3_gathered_parameters
from simcomm.parallel.numeric_training import train

MODEL = model_preset("gpt3-1.3b", num_layers=4)  # units: 4 decoder layers, the embedding, the final norm (output)
L = 4


def run(model=MODEL, **kw):
    cluster = build_cluster("hgx-h100")
    cfg = dict(global_batch_size=32, micro_batch_size=2, zero_stage=3, memory_reserved=0)  # 2 micro-batches
    layout = build_layout(model, TrainingConfig(**{**cfg, **kw}), cluster.num_ranks)
    return layout, StepModel(layout, cluster).run()


def gathers(res, rank=0) -> Counter:
    return Counter(a.tags["use"] for a in res.simulation.recorder.activities()
                   if a.kind == "collective" and a.rank == rank and a.tags.get("phase") == "param_gather")


@pytest.mark.parametrize("kw,per_step", [
    # Megatron-FSDP: every layer gathered for its forward and again for its backward; the root (embedding, final
    # norm) kept from forward to backward
    (dict(), {"forward": 2 * (L + 2), "backward": 2 * L}),
    # a recomputed layer's gather serves its recomputation and its backward (one FSDP pre-backward gather)
    (dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
     {"forward": 2 * (L + 2), "recompute": 2 * L}),
    # torchtitan (FSDP2) without PP reshards the embedding too (its output unit is kept)
    (dict(framework="torchtitan"), {"forward": 2 * (L + 2), "backward": 2 * (L + 1)}),
    # reshard_after_forward false: ZeRO-2's traffic, ZeRO-3's memory between steps
    (dict(reshard_after_forward=False), {"forward": 2 * (L + 2)}),
    # DeepSpeed: every module with parameters is its own unit (the norms stay whole under the persistence
    # threshold); with no reuse distance each is freed after use, except the embedding, whose backward is
    # followed at once by the next micro-batch's forward
    (dict(framework="deepspeed", stage3_max_reuse_distance=0), {"forward": 2 * 4 * L + 1, "backward": 2 * 4 * L}),
])
def test_zero3_gathers_per_layer_and_step(kw, per_step):
    layout, res = run(**kw)
    assert layout.microbatches == 2
    assert gathers(res) == per_step


def test_deepspeed_keeps_what_is_reused_within_its_distance():
    """The default stage3_max_reuse_distance (1e9 parameters) exceeds this stage's parameters: nothing is
    freed, so the forward's gathers are all the step makes."""
    _, res = run(framework="deepspeed")
    assert gathers(res) == {"forward": 4 * L + 1}


def test_torchtitan_under_pipeline_parallelism_reduces_once_per_step():
    """torch.distributed.pipelining keeps FSDP2's unsharded gradients until the last micro-batch."""
    _, titan = run(framework="torchtitan", pipeline_model_parallel_size=2)
    _, mega = run(pipeline_model_parallel_size=2)

    def reductions(res):
        return sum(1 for a in res.simulation.recorder.activities() if a.kind == "collective" and a.rank == 0
                   and a.tags.get("phase") == "grad_reduce_scatter")
    assert reductions(mega) == 4 * reductions(titan) == 4 * 3  # 4 micro-batches; the stage's 2 layers, embedding
    assert gathers(titan) == {"forward": 3}  # under PP neither the forward nor the backward reshards


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_memory_follows_the_prefetch_depth(depth):
    """The units in use and `depth` prefetched ones, beside the embedding Megatron-FSDP keeps gathered."""
    layout = build_layout(MODEL, TrainingConfig(global_batch_size=16, zero_stage=3, forward_prefetch=depth,
                                                backward_prefetch=depth), 8)
    embedding = stage_parameters(layout, 0)["embedding"]
    assert zero3_gathered_parameters(layout, 0) == pytest.approx((1 + depth) * layout.layer_params + embedding)


def test_prefetch_hides_gathers_and_resharding_costs_traffic():
    _, none = run(forward_prefetch=0, backward_prefetch=0)
    _, one = run()
    assert none.breakdown["dp"] > 1.5 * one.breakdown["dp"] and none.step_time > one.step_time
    _, kept = run(reshard_after_forward=False)
    assert kept.peak_memory > one.peak_memory


def test_gradients_are_reduced_in_the_frameworks_dtype():
    assert TrainingConfig(8, framework="megatron").grad_bytes == 4  # grad_reduce_in_fp32 forced with bf16
    assert TrainingConfig(8, framework="torchtitan").grad_bytes == 4  # MixedPrecisionPolicy reduce_dtype fp32
    assert TrainingConfig(8, framework="deepspeed").grad_bytes == 2  # the model's dtype
    assert TrainingConfig(8, framework="deepspeed", accumulate_allreduce_grads_in_fp32=True).grad_bytes == 4
    _, mega = run()
    _, ds = run(framework="deepspeed", stage3_max_reuse_distance=0)

    def reduced(res):
        return sum(a.nbytes for a in res.simulation.recorder.activities() if a.kind == "collective"
                   and a.rank == 0 and a.tags.get("phase") == "grad_reduce_scatter")
    assert reduced(mega) == pytest.approx(2 * reduced(ds), rel=1e-6)


def test_release_prefetches_units_not_uses():
    """A recomputed block's two uses are one unit: prefetching one unit ahead issues the next block's gather at
    the start of the previous block's recomputation."""
    g = Gathering("megatron", False, True, forward_prefetch=1, backward_prefetch=1)
    uses = [Use((3, ""), 1.0, "recompute", 0), Use((3, ""), 1.0, "backward", 1),
            Use((2, ""), 1.0, "recompute", 2), Use((2, ""), 1.0, "backward", 3)]
    todo, frees, held = g.plan(uses)
    assert todo == [True, False, True, False] and frees == [False, True, False, True] and not held
    assert g.release(uses, todo) == [0, 1, 0, 3]


def test_deepspeed_modules_are_the_layers_linears_and_norms():
    layout = build_layout(MODEL, TrainingConfig(global_batch_size=16, zero_stage=3, framework="deepspeed"), 8)
    mods = layer_modules(layout.layer_shape)
    assert sum(p for _, p in mods) == pytest.approx(layout.layer_params, rel=1e-6)
    g = gathering(layout.config)
    assert sum(not g.persistent(Use((0, m), p, "forward")) for m, p in mods) == 4  # QKV, proj, FC1, FC2


@pytest.mark.parametrize("kw,stage", [(dict(data_parallel_sharding_strategy="no_shard"), 0),
                                      (dict(data_parallel_sharding_strategy="optim"), 1),
                                      (dict(use_distributed_optimizer=True), 1),
                                      (dict(zero_stage=2), 2),
                                      (dict(data_parallel_sharding_strategy="optim_grads_params", zero_stage=3), 3)])
def test_the_sharding_has_megatron_fsdps_names_and_zero_stages(kw, stage):
    cfg = TrainingConfig(8, **kw)
    assert cfg.stage == stage
    assert cfg.sharding_strategy == ("no_shard", "optim", "optim_grads", "optim_grads_params")[stage]
    assert build_layout(MODEL, cfg, 8).sharding.zero_stage == stage


@pytest.mark.parametrize("kw,field,match", [
    (dict(data_parallel_sharding_strategy="optim", zero_stage=3), "data_parallel_sharding_strategy",
     "optim is ZeRO stage 1; zero_stage 3 contradicts it"),
    (dict(data_parallel_sharding_strategy="no_shard", use_distributed_optimizer=True),
     "data_parallel_sharding_strategy", "no_shard contradicts it"),
    (dict(zero_stage=0, use_distributed_optimizer=True), "zero_stage", "zero_stage 0 contradicts it"),
    (dict(framework="torchtitan", zero_stage=1), "data_parallel_sharding_strategy", "torchtitan shards with FSDP2"),
    (dict(framework="deepspeed", zero_stage=3, pipeline_model_parallel_size=2), "pipeline_model_parallel_size",
     "DeepSpeed's pipeline engine"),
    (dict(framework="deepspeed", zero_stage=3, forward_prefetch=2), "forward_prefetch", "FSDP's"),
    (dict(framework="torchtitan", zero_stage=3, stage3_max_live_parameters=10), "stage3_max_live_parameters",
     "DeepSpeed's"),
    (dict(framework="fairscale"), "framework", "megatron"),
    (dict(data_parallel_sharding_strategy="zero3"), "data_parallel_sharding_strategy", "optim_grads_params"),
])
def test_sharding_errors_name_their_field(kw, field, match):
    with pytest.raises(ConfigError, match=match) as info:
        TrainingConfig(8, **kw)
    assert info.value.field == field


TINY = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=8, padded_vocab_size=32,
                         num_query_groups=2)


def numeric_loss(**kw):
    config = TrainingConfig(global_batch_size=8, micro_batch_size=2, train_iters=1, **kw)
    res = simcomm.spawn(train, args=(build_layout(TINY, config, 4),), nprocs=4)
    assert not res.results[0]["params"]  # ZeRO-3 keeps shards only
    return res.results[0]["loss"], config


@pytest.mark.parametrize("kw", [dict(framework="torchtitan", zero_stage=3, reshard_after_forward=False),
                                dict(framework="deepspeed", zero_stage=3, stage3_prefetch_bucket_size=10,
                                     stage3_param_persistence_threshold=0),
                                dict(data_parallel_sharding_strategy="optim_grads_params", forward_prefetch=2)])
def test_both_paths_run_every_frameworks_zero3(kw):
    """The numeric path trains the layout to the same loss as Megatron's ZeRO-3 (the knobs change when parameters
    move, not what is computed) and the step model costs it."""
    loss, config = numeric_loss(**kw)
    assert loss == numeric_loss(zero_stage=3)[0] and loss[0] > 0
    cluster = build_cluster("hgx-h100")
    step = StepModel(build_layout(TINY, config.replace(world_size=4), cluster.num_ranks), cluster).run()
    assert step.step_time > 0 and gathers(step)["forward"] > 0
