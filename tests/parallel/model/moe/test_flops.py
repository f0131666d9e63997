"""The FLOPs an MoE layer executes (its Flops counter) equal Megatron's active-parameter count plus the router and
gate GEMMs Megatron leaves out; padding to capacity executes more."""
import numpy as np
import pytest

from simcomm.parallel.model.layers import Flops
from simcomm.parallel.model.moe import (get_capacity, init_moe_params, layer_forward_flops_per_token,
                                        megatron_moe_flops_per_token, moe_backward, moe_forward)

from .helpers import moe_config

H, S, B = 8, 10, 2


def _counted(moe, seed=0):
    params = init_moe_params(H, moe, seed=seed, std=0.5)
    x = np.random.default_rng(seed).standard_normal((S, B, H))
    fl = Flops()
    y, saved = moe_forward(x, params, moe, fl=fl)
    forward = fl.total
    moe_backward(np.ones_like(y), saved, params, {n: np.zeros_like(p) for n, p in params.items()}, moe, fl=fl)
    return forward, fl.total, saved


@pytest.mark.parametrize("moe", [
    moe_config(num_moe_experts=4, moe_ffn_hidden_size=6, swiglu=True),
    moe_config(num_moe_experts=6, moe_ffn_hidden_size=5, moe_router_topk=3, moe_shared_expert_intermediate_size=7),
    moe_config(num_moe_experts=8, moe_ffn_hidden_size=3, moe_router_topk=4, swiglu=True,
              moe_shared_expert_intermediate_size=4, moe_shared_expert_gate=True, moe_router_score_function="sigmoid"),
])
def test_counted_flops_are_megatrons_count_plus_the_router(moe):
    forward, total, _ = _counted(moe)
    T = S * B
    groups = layer_forward_flops_per_token(H, moe)
    assert forward == pytest.approx(T * sum(groups.values()), rel=1e-12)
    gate = 2.0 * H if moe.moe_shared_expert_gate else 0.0
    unmodelled = 3 * (groups["router"] + gate)  # what Megatron's formula leaves out
    assert total == pytest.approx(T * (megatron_moe_flops_per_token(H, moe) + unmodelled), rel=1e-12)
    assert megatron_moe_flops_per_token(H, moe) == pytest.approx(3 * (groups["experts"] + groups["shared_experts"]
                                                                      - gate), rel=1e-12)


def test_megatrons_formula_for_published_models():
    """Megatron's 12 h (f_e k + f_sh) 3/2 per MoE layer and token: Mixtral 8x7B and DeepSeek-V3."""
    mixtral = moe_config(num_moe_experts=8, moe_ffn_hidden_size=14336, swiglu=True)
    assert megatron_moe_flops_per_token(4096, mixtral) == 18 * 4096 * 14336 * 2
    v3 = moe_config(num_moe_experts=256, moe_ffn_hidden_size=2048, moe_router_topk=8, swiglu=True,
                   moe_shared_expert_intermediate_size=2048, moe_router_score_function="sigmoid")
    assert megatron_moe_flops_per_token(7168, v3) == 18 * 7168 * 2048 * 9  # 8 routed + 1 shared expert


def test_padding_executes_every_experts_capacity():
    moe = moe_config(num_moe_experts=4, moe_ffn_hidden_size=6, swiglu=True, moe_expert_capacity_factor=1.5,
                    moe_pad_expert_input_to_capacity=True)
    forward, _, saved = _counted(moe)
    T = S * B
    rows = 4 * min(get_capacity(T * 2, 4, 1.5), T)
    assert saved.tokens_per_expert.sum() == rows
    assert forward == pytest.approx(T * 2 * H * 4 + rows * 2 * H * 3 * 6, rel=1e-12)
