"""Which layouts each framework runs, and the arguments that ask it for one (its real flag and key names)."""
import json

import pytest

from simcomm.parallel import TrainingConfig, build_layout, model_preset
from simcomm.parallel import frameworks as fw
from simcomm.parallel import search

MODEL = model_preset("llama3-8b", num_layers=8)


def _layout(**kw):
    return build_layout(MODEL, TrainingConfig(global_batch_size=64, **kw), 64)


def test_each_framework_refuses_what_it_cannot_run():
    assert fw.refusal("megatron", pp=2, cp=1, schedule="gpipe", zero=0)  # no GPipe in Megatron-LM
    assert fw.refusal("megatron", pp=2, cp=1, schedule="1f1b", zero=3)  # Megatron-FSDP: no pipeline
    assert fw.refusal("megatron", pp=1, cp=2, schedule="1f1b", zero=3) is None
    assert fw.refusal("megatron", pp=4, cp=2, schedule="interleaved_1f1b", zero=1) is None
    assert fw.refusal("torchtitan", pp=1, cp=1, schedule="1f1b", zero=1)  # FSDP2 shards parameters too
    assert fw.refusal("torchtitan", pp=4, cp=2, schedule="gpipe", zero=3) is None
    assert fw.refusal("deepspeed", pp=1, cp=2, schedule="1f1b", zero=0)  # no ring CP
    assert fw.refusal("deepspeed", pp=2, cp=1, schedule="1f1b", zero=2)
    assert fw.refusal("deepspeed", pp=2, cp=1, schedule="interleaved_1f1b", zero=1)
    assert fw.refusal("deepspeed", pp=1, cp=1, schedule="1f1b", zero=3) is None
    assert fw.refusal(None, pp=2, cp=1, schedule="1f1b", zero=3) and fw.refusal(None, pp=1, cp=1, schedule="gpipe",
                                                                                 zero=2) is None
    with pytest.raises(ValueError):
        fw.refusal("jax", pp=1, cp=1, schedule="1f1b", zero=0)


def test_the_search_offers_only_the_frameworks_layouts():
    base = TrainingConfig(global_batch_size=16)
    for name in fw.FRAMEWORKS:
        cands = search.candidates(MODEL, base, 16, 8, search.SearchSpace(framework=name, recompute=(None,)))
        assert cands and all(fw.refusal(name, pp=c.pp, cp=c.cp, schedule=c.schedule, zero=c.zero) is None
                             for c in cands)
    titan = search.candidates(MODEL, base, 16, 8, search.SearchSpace(framework="torchtitan", recompute=(None,)))
    assert {c.zero for c in titan} == {0, 3} and any(c.zero == 3 and c.pp > 1 for c in titan)
    mega = search.candidates(MODEL, base, 16, 8, search.SearchSpace(framework="megatron", recompute=(None,)))
    assert "gpipe" not in {c.schedule for c in mega} and all(c.pp == 1 for c in mega if c.zero >= 2)


def test_megatron_arguments_are_its_flags():
    layout = _layout(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, context_parallel_size=2,
                     num_layers_per_virtual_pipeline_stage=2, sequence_parallel=True, use_distributed_optimizer=True,
                     overlap_grad_reduce=True, overlap_param_gather=True, recompute_granularity="full")
    line = " ".join(fw.arguments("megatron", layout))
    assert line == ("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --context-parallel-size 2 "
                    "--num-layers-per-virtual-pipeline-stage 2 --sequence-parallel --micro-batch-size 1 "
                    "--global-batch-size 64 --use-distributed-optimizer --overlap-grad-reduce "
                    "--overlap-param-gather --recompute-granularity full --recompute-method uniform "
                    "--recompute-num-layers 1 --bf16")
    split = " ".join(fw.arguments("megatron", _layout(pipeline_model_parallel_size=2, overlap_p2p_comm=True,
                                                      decoder_first_pipeline_num_layers=3)))
    assert "--decoder-first-pipeline-num-layers 3" in split and "--overlap-p2p-communication" in split
    fsdp = " ".join(fw.arguments("megatron", _layout(tensor_model_parallel_size=2, zero_stage=3)))
    assert "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params" in fsdp


def test_torchtitan_keys_and_deepspeed_config():
    layout = _layout(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, zero_stage=3,
                     recompute_granularity="selective")
    lines = fw.arguments("torchtitan", layout)
    assert lines[0] == "[parallelism]" and "data_parallel_shard_degree = 16" in lines
    assert "data_parallel_replicate_degree = 1" in lines and "tensor_parallel_degree = 2" in lines
    assert "pipeline_parallel_degree = 2" in lines and 'pipeline_parallel_schedule = "1F1B"' in lines
    assert "local_batch_size = 4" in lines and lines[-2:] == ["[activation_checkpoint]", 'mode = "selective"']
    ddp = fw.arguments("torchtitan", _layout(tensor_model_parallel_size=2))
    assert "data_parallel_replicate_degree = 32" in ddp and "data_parallel_shard_degree = 1" in ddp
    ds = fw.arguments("deepspeed", _layout(tensor_model_parallel_size=2, zero_stage=2, overlap_grad_reduce=True))
    config = json.loads(ds[-1].removeprefix("ds_config: "))
    assert config == {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
                      "zero_optimization": {"stage": 2, "overlap_comm": True}, "bf16": {"enabled": True}}
    assert "--tensor-model-parallel-size 2" in ds and "--no-pipeline-parallel" in ds
    assert fw.runners(_layout(context_parallel_size=2)) == ["megatron", "torchtitan"]
