"""Training settings with Megatron-LM's names: its rules for batches, virtual stages and the pipeline split."""
import pytest

from simcomm.parallel import LayoutError, TrainingConfig, build_layout, model_preset


def layout(model="llama3-8b", world=64, **kw):
    kw.setdefault("global_batch_size", 64)
    return build_layout(model_preset(model), TrainingConfig(**kw), world)


def test_microbatches_and_dp():
    lay = layout(tensor_model_parallel_size=4, pipeline_model_parallel_size=2, micro_batch_size=2)
    assert (lay.dims.dp, lay.microbatches, lay.schedule_name) == (8, 4, "1f1b")
    assert [len(x[0]) for x in lay.stage_layers] == [16, 16]


@pytest.mark.parametrize("kw,match", [
    (dict(tensor_model_parallel_size=3, world_size=48), "num_attention_heads \\(32\\) is not divisible by tensor"),
    (dict(global_batch_size=60, pipeline_model_parallel_size=2), "global_batch_size \\(60\\) is not divisible"),
    (dict(pipeline_model_parallel_size=5, world_size=40), "num_layers \\(32\\) is not divisible"),
    (dict(pipeline_model_parallel_size=2, num_layers_per_virtual_pipeline_stage=3), "must divide the layers"),
    (dict(pipeline_model_parallel_size=2, zero_stage=3), "ZeRO stage 3"),
    (dict(world_size=128), "more than the cluster's 64"),
    (dict(overlap_param_gather=True), "needs use_distributed_optimizer"),
    (dict(pipeline_schedule="interleaved_1f1b", pipeline_model_parallel_size=2), "needs num_layers_per_virtual"),
    (dict(context_parallel_size=3, world_size=48), "2 x context_parallel_size"),
])
def test_megatrons_rules_are_errors_naming_the_argument(kw, match):
    with pytest.raises(LayoutError, match=match):
        layout(**kw)


def test_interleaved_needs_a_full_last_group():
    with pytest.raises(LayoutError, match="would deadlock"):
        layout(global_batch_size=6, pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=4,
               world_size=4)


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
