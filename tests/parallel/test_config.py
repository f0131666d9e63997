"""TrainingConfig.replace checks only the changed fields (the rest were checked when the config was made) and every
rule across fields: the same config, or the same error, as dataclasses.replace, which checks them all."""
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.parallel.config import ConfigError, TrainingConfig

VALUES = {  # per field, values that pass its own check and values that fail it or a rule across fields
    "micro_batch_size": [1, 4, 0, 2.5], "tensor_model_parallel_size": [1, 8, 0, True],
    "zero_stage": [None, 0, 1, 3, 4], "use_distributed_optimizer": [False, True, 1],
    "data_parallel_sharding_strategy": [None, "optim_grads", "no_shard", "zero9"],
    "overlap_grad_reduce": [False, True], "overlap_param_gather": [False, True],
    "recompute_granularity": [None, "full", "selective", "some"], "recompute_modules": [None, ["core_attn"], ["x"]],
    "bf16": [True, False], "fp16": [False, True], "framework": ["megatron", "torchtitan", "deepspeed", "jax"],
    "moe_routing_skew": [0.0, 1.5, -1.0], "moe_expert_load": [None, [1.0, 2.0], (), [0.0]],
    "num_layers_per_virtual_pipeline_stage": [None, 2], "virtual_pipeline_model_parallel_size": [None, 2, 0],
    "params_dtype": ["float64", "bfloat16", "int8"], "size_only": [False, True], "reshard_after_forward": [None, True],
    "stage3_max_live_parameters": [None, 10**9],
}


def outcome(make):
    try:
        return make()
    except ConfigError as exc:
        return ("error", str(exc), exc.field)


@settings(max_examples=300, deadline=None)
@given(base=st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in VALUES.items()}),
       changes=st.fixed_dictionaries({}, optional={k: st.sampled_from(v) for k, v in VALUES.items()}))
def test_replace_checks_as_a_new_config_does(base, changes):
    made = outcome(lambda: TrainingConfig(global_batch_size=64, **base))
    if not isinstance(made, TrainingConfig):
        return
    assert outcome(lambda: made.replace(**changes)) == outcome(lambda: dataclasses.replace(made, **changes))


def test_replace_refuses_an_unknown_field():
    with pytest.raises(TypeError, match="no field tensor_parallel"):
        TrainingConfig(global_batch_size=8).replace(tensor_parallel=2)
