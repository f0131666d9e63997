"""The one layout of a training config (Megatron-LM's names and rules): batches, virtual stages, the pipeline
split, bucket sizes; every refusal names its field; numeric training and the step model get the same answer."""
import pytest

import simcomm
import simcomm.parallel.layout as layout_module
from simcomm.hardware import build_cluster
from simcomm.parallel import ConfigError, LayoutError, StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.numeric_training import train
from simcomm.parallel.pipeline_parallel.actions import Action


def layout(model="llama3-8b", world=64, check_schedule=True, **kw):
    kw.setdefault("global_batch_size", 64)
    return build_layout(model_preset(model), TrainingConfig(**kw), world, check_schedule)


def test_microbatches_and_dp():
    lay = layout(tensor_model_parallel_size=4, pipeline_model_parallel_size=2, micro_batch_size=2)
    assert (lay.dims.dp, lay.microbatches, lay.schedule_name) == (8, 4, "1f1b")
    assert [len(x[0]) for x in lay.stage_layers] == [16, 16]


@pytest.mark.parametrize("kw,field,match", [
    (dict(tensor_model_parallel_size=3, world_size=48), "tensor_model_parallel_size",
     "num_attention_heads \\(32\\) is not divisible by tensor"),
    (dict(tensor_model_parallel_size=3), "tensor_model_parallel_size", "not divisible by tp x pp x cp"),
    (dict(global_batch_size=60, pipeline_model_parallel_size=2), "global_batch_size",
     "global_batch_size \\(60\\) is not divisible"),
    (dict(pipeline_model_parallel_size=5, world_size=40), "pipeline_model_parallel_size",
     "num_layers \\(32\\) is not divisible"),
    (dict(pipeline_model_parallel_size=2, num_layers_per_virtual_pipeline_stage=3),
     "num_layers_per_virtual_pipeline_stage", "must divide the layers"),
    (dict(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=3),
     "virtual_pipeline_model_parallel_size", "must divide the layers"),
    (dict(world_size=128), "world_size", "more than the cluster's 64"),
    (dict(overlap_param_gather=True), "overlap_param_gather", "needs use_distributed_optimizer"),
    (dict(pipeline_schedule="interleaved_1f1b", pipeline_model_parallel_size=2), "pipeline_schedule",
     "needs num_layers_per_virtual"),
    (dict(context_parallel_size=3, world_size=48), "context_parallel_size", "2 x context_parallel_size"),
    (dict(recompute_granularity="partial"), "recompute_granularity", "must be one of full, selective or none"),
    (dict(micro_batch_size=0), "micro_batch_size", "from 1 to"),
    (dict(bf16=True, fp16=True), "fp16", "exclusive"),
    (dict(num_layers_per_virtual_pipeline_stage=2, virtual_pipeline_model_parallel_size=2),
     "virtual_pipeline_model_parallel_size", "not both"),
])
def test_megatrons_rules_are_errors_naming_the_argument(kw, field, match):
    with pytest.raises(ConfigError, match=match) as info:
        layout(**kw)
    assert info.value.field == field and isinstance(info.value, LayoutError)


def test_a_step_of_more_passes_than_the_bound_is_refused_at_once():
    """global_batch_size 10**8 validated, then would have run for about 15 hours (issue 21): a step runs pass by
    pass, so micro-batches x chunks x stages is bounded, the error naming global_batch_size and the bound (and
    refused before the schedule is built: that alone took minutes and gigabytes)."""
    from simcomm.parallel.layout import MAX_PIPELINE_PASSES
    with pytest.raises(ConfigError, match="global_batch_size \\(100,000,000\\) makes 100,000,000 micro-batches "
                                          "per pipeline x 1 model chunk x 2 stages = 200,000,000 forward passes a "
                                          "step; simcomm runs each, and at most 65,536") as info:
        layout(world=2, global_batch_size=10 ** 8, pipeline_model_parallel_size=2)
    assert info.value.field == "global_batch_size"
    edge = layout(world=8, global_batch_size=MAX_PIPELINE_PASSES, pipeline_model_parallel_size=2,
                  virtual_pipeline_model_parallel_size=2)  # dp 4: m = bound / 4, x 2 chunks x 2 stages
    assert edge.microbatches * edge.chunks * edge.dims.pp == MAX_PIPELINE_PASSES
    with pytest.raises(ConfigError, match="= 65,540 forward passes"):
        layout(world=4, global_batch_size=MAX_PIPELINE_PASSES // 4 + 1, pipeline_model_parallel_size=4)


@pytest.mark.parametrize("layers, kw, field, match", [
    (100_000, dict(zero_stage=3), "num_layers", "num_layers \\(100,000\\) makes 1 micro-batch per pipeline x 1 "
     "model chunk x 1 stage x 100,000 layers a chunk \\(ZeRO-3 gathers each layer's parameters\\) = 100,000 pass "
     "pieces a step; .* fewer layers, or a ZeRO stage below 3, give fewer"),
    (10_000, dict(zero_stage=3, global_batch_size=8), "global_batch_size", "= 80,000 pass pieces"),
    (100_000, dict(global_batch_size=11), "global_batch_size", "global_batch_size \\(11\\) makes 11 micro-batches "
     "per pipeline x 100,000 layers = 1,100,000 layer passes a step; simcomm runs each, and at most 1,048,576")])
def test_a_step_of_more_layer_passes_than_the_bounds_is_refused(layers, kw, field, match):
    """num_layers 100,000 with ZeRO-3 ran for minutes at one micro-batch (each layer's parameter gather cuts the
    pass), and hours at 64: layers count where the step runs them."""
    model = TransformerConfig(num_layers=layers, hidden_size=64, num_attention_heads=4, seq_length=16,
                              padded_vocab_size=64)
    with pytest.raises(ConfigError, match=match) as info:
        build_layout(model, TrainingConfig(**{"global_batch_size": 1, **kw}), 1)
    assert info.value.field == field
    build_layout(model, TrainingConfig(**{**kw, "global_batch_size": 1, "zero_stage": 2}), 1)  # within both


def test_interleaved_needs_a_full_last_group():
    with pytest.raises(LayoutError, match="would deadlock"):
        layout(global_batch_size=6, pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=4,
               world_size=4)


def test_a_layout_that_runs_has_its_schedule_checked_one_read_for_memory_need_not(monkeypatch):
    """The plan screens thousands of layouts for memory without checking their schedules; one built to run checks
    it, even after a memory-only build of the same schedule."""
    swapped = [[Action("F", 1), Action("F", 0), Action("B", 0), Action("B", 1)],
               [Action("F", 0), Action("B", 0), Action("F", 1), Action("B", 1)]]  # rank 0 sends F1 first
    monkeypatch.setattr(layout_module, "_built", lambda *key: swapped)
    monkeypatch.setattr(layout_module, "_CHECKED", set())
    kw = dict(pipeline_model_parallel_size=2, world_size=2, global_batch_size=2)
    assert layout(**kw, check_schedule=False).schedule is swapped
    with pytest.raises(ConfigError, match="rank 0 sends the activations of micro-batches 1, 0 to rank 1") as exc:
        layout(**kw)
    assert exc.value.field == "global_batch_size"


def test_embedding_and_loss_count_as_layers_like_llama3():
    lay = layout("llama3-405b", 16384, global_batch_size=2048, tensor_model_parallel_size=8,
                 pipeline_model_parallel_size=16, num_layers_per_virtual_pipeline_stage=4,
                 account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True)
    counts = [[len(c) for c in r] for r in lay.stage_layers]
    assert lay.chunks == 2 and counts[0] == [3, 4] and counts[-1] == [4, 3] and sum(map(sum, counts)) == 126
    flat = [i for c in range(2) for r in range(16) for i in lay.stage_layers[r][c]]
    assert flat == list(range(126))  # virtual stages hold consecutive layers in order


def test_first_and_last_stage_layer_counts():
    lay = layout(pipeline_model_parallel_size=4, decoder_first_pipeline_num_layers=5,
                 decoder_last_pipeline_num_layers=9, world_size=4, global_batch_size=8)
    assert [len(r[0]) for r in lay.stage_layers] == [5, 9, 9, 9]


def test_virtual_stages_by_count_or_by_layers_are_the_same_split():
    by_layers = layout(pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=2, world_size=4)
    by_count = layout(pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=4, world_size=4)
    assert by_layers.chunks == by_count.chunks == 4 and by_layers.stage_layers == by_count.stage_layers
    assert by_count.schedule_name == "interleaved_1f1b"


def test_bucket_size_follows_megatrons_rule():
    """max(40M, 1M x data-parallel size, CP included) with overlap_grad_reduce; one bucket without; or as given."""
    assert layout(world_size=64).bucket_size is None
    assert layout(world_size=64, overlap_grad_reduce=True).bucket_size == 64_000_000
    assert layout(world_size=8, overlap_grad_reduce=True).bucket_size == 40_000_000
    assert layout(world_size=64, context_parallel_size=2, overlap_grad_reduce=True).bucket_size == 64_000_000
    assert layout(world_size=64, bucket_size=1000).bucket_size == 1000


def test_numerics_follow_megatron():
    assert [TrainingConfig(8, **kw).precision for kw in ({}, dict(bf16=False, fp16=True), dict(bf16=False),
                                                         dict(bf16=False, tf32=False))] == ["bf16", "fp16", "tf32",
                                                                                            "fp32"]
    assert TrainingConfig(8, tf32=False).precision == "bf16"  # TF32 concerns fp32 GEMMs only
    assert TrainingConfig(8).flash_attention and not TrainingConfig(8, bf16=False).flash_attention
    assert TrainingConfig(8).grad_bytes == 4  # bf16 forces fp32 gradient accumulation and reduction
    assert TrainingConfig(8, bf16=False, fp16=True).grad_bytes == 2
    assert TrainingConfig(8, use_distributed_optimizer=True).stage == 1
    assert not TrainingConfig(8, sequence_parallel=True).sp  # no TP, no SP


TINY = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=8, padded_vocab_size=32,
                         num_query_groups=2)


def test_pipeline_and_zero3_run_on_both_paths():
    """pp = 2 with ZeRO-3 (FSDP units under a pipeline, as torchtitan runs them): one layout, numeric training trains
    it and the step model costs it."""
    config = TrainingConfig(global_batch_size=4, micro_batch_size=2, pipeline_model_parallel_size=2, zero_stage=3,
                            train_iters=1)
    lay = build_layout(TINY, config, 4)
    res = simcomm.spawn(train, args=(lay,), nprocs=4)
    assert res.results[-1]["loss"][0] > 0 and not res.results[0]["params"]  # trained, ZeRO-3 keeps shards only
    cluster = build_cluster("hgx-h100")
    step = StepModel(build_layout(TINY, config.replace(world_size=4), cluster.num_ranks), cluster).run()
    gathers = [a for a in step.simulation.recorder.activities() if a.tags.get("phase") == "param_gather"]
    assert step.step_time > 0 and {a.tags["stage"] for a in gathers} == {0, 1}


@pytest.mark.parametrize("kw", [dict(tensor_model_parallel_size=4), dict(pipeline_model_parallel_size=4),
                                dict(recompute_granularity="full", recompute_method="block"),
                                dict(global_batch_size=6, micro_batch_size=4)])
def test_a_refused_layout_is_refused_on_both_paths_with_the_same_message(kw):
    config = TrainingConfig(**{"global_batch_size": 8, **kw})
    with pytest.raises(ConfigError) as numeric:
        simcomm.spawn(train, args=(build_layout(TINY, config, 4),), nprocs=4)
    cluster = build_cluster("pcie-4gpu")
    with pytest.raises(ConfigError) as step:
        StepModel(build_layout(TINY, config, cluster.num_ranks), cluster)
    assert str(numeric.value) == str(step.value) and numeric.value.field == step.value.field


@pytest.mark.parametrize("kw,field,match", [
    (dict(expert_model_parallel_size=3, world_size=48), "expert_model_parallel_size",
     "num_moe_experts \\(8\\) is not divisible by expert_model_parallel_size \\(3\\)"),
    (dict(expert_model_parallel_size=8, tensor_model_parallel_size=2, sequence_parallel=True, world_size=8),
     "expert_model_parallel_size", "not divisible by expert_tensor_parallel_size x expert_model_parallel_size"),
    (dict(tensor_model_parallel_size=2), "sequence_parallel", "need sequence_parallel"),
    (dict(moe_token_dispatcher_type="allgather"), "moe_token_dispatcher_type", "not modelled"),
    (dict(moe_expert_load=[1, 2]), "moe_expert_load", "gives 2 loads for 8 experts"),
])
def test_expert_layout_errors_name_their_field(kw, field, match):
    with pytest.raises(ConfigError, match=match) as e:
        layout("mixtral-8x7b", **kw)
    assert e.value.field == field


def test_expert_fields_need_an_moe_model():
    with pytest.raises(ConfigError, match="needs a mixture-of-experts model") as e:
        layout(expert_model_parallel_size=2)
    assert e.value.field == "expert_model_parallel_size"


def test_expert_grid_of_a_layout():
    lay = layout("mixtral-8x7b", tensor_model_parallel_size=2, sequence_parallel=True, expert_model_parallel_size=8,
                 expert_tensor_parallel_size=1, pipeline_model_parallel_size=4)
    assert (lay.dims.dp, lay.dims.ep, lay.dims.etp, lay.dims.edp) == (8, 8, 1, 2)
    assert "ep=8 etp=1 edp=2" in lay.describe()
