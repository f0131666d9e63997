"""MoE settings: Megatron's defaults and rules, with clear errors; which layers are MoE."""
import pytest

from simcomm.parallel.model import ModelConfigError
from simcomm.parallel.model.moe import get_capacity, moe_layer_pattern, parse_moe_layer_freq
from simcomm.parallel.model.moe.config import aux_loss_coeffs

from .helpers import moe_config

BASE = dict(num_moe_experts=8, moe_ffn_hidden_size=16)


def test_megatron_defaults():
    c = moe_config(**BASE)
    assert (c.moe_router_topk, c.moe_router_score_function, c.moe_router_load_balancing_type) == (2, "softmax",
                                                                                                   "aux_loss")
    assert (c.moe_aux_loss_coeff, c.moe_z_loss_coeff, c.moe_expert_capacity_factor) == (0.0, None, None)
    assert (c.moe_token_drop_policy, c.moe_router_bias_update_rate, c.moe_layer_freq) == ("probs", 1e-3, 1)
    assert hash(moe_config(**BASE, moe_layer_freq=[1, 0], moe_router_load_balancing_type=["aux_loss", "none"],
                          moe_aux_loss_coeff=[0.1, 0.0]))  # lists become tuples: the config stays hashable


@pytest.mark.parametrize("kwargs,message", [
    (dict(num_moe_experts=0), "num_moe_experts must be"),
    (dict(moe_router_topk=9), "more than num_moe_experts"),
    (dict(moe_router_topk=1), "needs moe_router_pre_softmax"),
    (dict(moe_router_score_function="relu"), "softmax or sigmoid"),
    (dict(moe_router_enable_expert_bias=True), "needs moe_router_score_function sigmoid"),
    (dict(moe_router_group_topk=2), "needs moe_router_num_groups"),
    (dict(moe_router_num_groups=3, moe_router_group_topk=1), "divisible by moe_router_num_groups"),
    (dict(moe_router_num_groups=4, moe_router_group_topk=1, moe_router_topk=3), "at most the experts"),
    (dict(moe_router_load_balancing_type="sinkhorn"), "'sinkhorn' is not modelled"),
    (dict(moe_router_load_balancing_type="aux"), "must be one of aux_loss, seq_aux_loss, none"),
    (dict(moe_router_load_balancing_type=["aux_loss", "seq_aux_loss"], moe_aux_loss_coeff=0.1), "same length"),
    (dict(moe_aux_loss_coeff=-1), "moe_aux_loss_coeff must be a non-negative number"),
    (dict(moe_expert_capacity_factor=0), "moe_expert_capacity_factor must be a positive number"),
    (dict(moe_pad_expert_input_to_capacity=True), "needs moe_expert_capacity_factor"),
    (dict(moe_token_drop_policy="random"), "probs or position"),
    (dict(moe_shared_expert_gate=True), "needs moe_shared_expert_intermediate_size"),
    (dict(moe_layer_freq=[1, 2]), r"only 0 \(dense\) and 1"),
    (dict(moe_layer_freq="[1]*2+import os"), "not an int or a list expression"),
    (dict(moe_layer_freq="__import__('os')"), "not an int or a list expression"),
])
def test_bad_settings_are_explained(kwargs, message):
    with pytest.raises(ModelConfigError, match=message):
        moe_config(**{**BASE, **kwargs})


def test_moe_layer_freq_as_megatron_reads_it():
    assert moe_layer_pattern(1, 3) == (True, True, True)
    assert moe_layer_pattern(2, 5) == (True, False, True, False, True)  # layer i when i % N == 0
    assert moe_layer_pattern("([0]*3+[1]*2)", 5) == (False, False, False, True, True)  # DeepSeek-V3's form
    assert moe_layer_pattern("[1,0]*2", 4) == (True, False, True, False)
    assert parse_moe_layer_freq("4") == 4 and parse_moe_layer_freq([0, 1]) == (0, 1)
    assert moe_config(**BASE, moe_layer_freq="([0]*1+[1]*2)").moe_layer_freq == (0, 1, 1)
    with pytest.raises(ModelConfigError, match="lists 3 layers but the model has num_layers 4"):
        moe_layer_pattern([0, 1, 1], 4)


def test_capacity_and_loss_coefficients():
    assert get_capacity(4096 * 2, 8, 1.0) == 1024 and get_capacity(10, 4, 1.0) == 3 and get_capacity(10, 4, 0.5) == 2
    c = moe_config(**BASE, moe_router_load_balancing_type=["aux_loss", "seq_aux_loss", "none"],
                  moe_aux_loss_coeff=[0.01, 1e-4, 0.0])
    assert aux_loss_coeffs(c) == {"aux_loss": 0.01, "seq_aux_loss": 1e-4}
    assert aux_loss_coeffs(moe_config(**BASE, moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.1)) == {}
