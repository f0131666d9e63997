"""The MoE layer's hand-written backward against torch autograd (a Megatron-Core-style layer written with torch
ops) and against finite differences, in float64, for every routing variant; the same code on size-only tensors."""
import dataclasses

import numpy as np
import pytest
import torch

from simcomm.parallel.model.layers import Flops
from simcomm.parallel.model.moe import init_moe_params, moe_backward, moe_forward
from simcomm.parallel.model.tensor import Meta, meta

from .helpers import moe_config
from .megatron_torch import moe_layer

H, S, B = 8, 6, 3
CONFIGS = {
    "softmax": moe_config(num_moe_experts=4, moe_ffn_hidden_size=6, swiglu=True, moe_aux_loss_coeff=0.1,
                         moe_z_loss_coeff=0.01),
    "pre-softmax-gelu-scaled": moe_config(num_moe_experts=5, moe_ffn_hidden_size=7, moe_router_topk=3,
                                         moe_router_pre_softmax=True, moe_router_topk_scaling_factor=1.7,
                                         moe_aux_loss_coeff=0.05),
    "softmax-groups": moe_config(num_moe_experts=6, moe_ffn_hidden_size=4, moe_router_topk=2, swiglu=True,
                                     moe_router_num_groups=3, moe_router_group_topk=1, moe_aux_loss_coeff=0.1),
    # DeepSeek-V3's router: sigmoid, expert bias, node-limited groups, scaling, sequence-wise loss, a shared expert
    "deepseek": moe_config(num_moe_experts=8, moe_ffn_hidden_size=4, moe_router_topk=4, swiglu=True,
                          moe_router_score_function="sigmoid", moe_router_enable_expert_bias=True,
                          moe_router_num_groups=4, moe_router_group_topk=2, moe_router_topk_scaling_factor=2.5,
                          moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=0.1,
                          moe_shared_expert_intermediate_size=5),
    "sigmoid-top1-both-losses": moe_config(num_moe_experts=4, moe_ffn_hidden_size=5, moe_router_topk=1,
                                          moe_router_score_function="sigmoid",
                                          moe_router_load_balancing_type=["aux_loss", "seq_aux_loss"],
                                          moe_aux_loss_coeff=[0.2, 0.3], moe_z_loss_coeff=0.02),
    "capacity-probs": moe_config(num_moe_experts=4, moe_ffn_hidden_size=6, swiglu=True, moe_expert_capacity_factor=0.8,
                                moe_aux_loss_coeff=0.1),
    "capacity-position-padded-gated-shared": moe_config(
        num_moe_experts=4, moe_ffn_hidden_size=6, swiglu=True, moe_expert_capacity_factor=0.7,
        moe_token_drop_policy="position", moe_pad_expert_input_to_capacity=True,
        moe_shared_expert_intermediate_size=6, moe_shared_expert_gate=True, moe_z_loss_coeff=0.01),
    "sigmoid-capacity-position": moe_config(num_moe_experts=6, moe_ffn_hidden_size=4, moe_router_topk=2,
                                           moe_router_score_function="sigmoid", moe_expert_capacity_factor=0.6,
                                           moe_token_drop_policy="position", moe_aux_loss_coeff=0.1),
}


def _dropless(moe):
    return dataclasses.replace(moe, moe_expert_capacity_factor=None, moe_pad_expert_input_to_capacity=False)


def _setup(name, seed=0):
    moe = CONFIGS[name]
    params = init_moe_params(H, moe, seed=seed, std=0.6)
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((S, B, H))
    bias = rng.standard_normal(moe.num_moe_experts) * 0.3 if moe.moe_router_enable_expert_bias else None
    return moe, params, x, bias, rng.standard_normal((S, B, H))


def _objective(moe, params, x, bias, r):
    """sum(y * r) plus the auxiliary losses, and what backward needs."""
    y, saved = moe_forward(x, params, moe, bias)
    return float((y * r).sum()) + sum(saved.losses.values()), y, saved


def _gradients(moe, params, x, bias, r):
    loss, y, saved = _objective(moe, params, x, bias, r)
    grads = {n: np.zeros_like(p) for n, p in params.items()}
    dx = moe_backward(r, saved, params, grads, moe)
    return loss, y, saved, grads, dx


@pytest.mark.parametrize("name", list(CONFIGS))
def test_backward_matches_torch_autograd(name):
    moe, params, x, bias, r = _setup(name)
    loss, y, saved, grads, dx = _gradients(moe, params, x, bias, r)
    tp = {n: torch.tensor(p, requires_grad=True) for n, p in params.items()}
    tx = torch.tensor(x, requires_grad=True)
    ty, tlosses, tmap = moe_layer(tx, tp, moe, bias)
    tloss = (ty * torch.tensor(r)).sum() + sum(tlosses.values())
    tloss.backward()
    np.testing.assert_array_equal(saved.routing.routing_map, tmap.numpy())
    assert set(saved.losses) == set(tlosses) and saved.losses
    for n, v in tlosses.items():
        assert saved.losses[n] == pytest.approx(v.item(), rel=1e-12), n
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-13)
    assert loss == pytest.approx(tloss.item(), rel=1e-12)
    for n in params:
        np.testing.assert_allclose(grads[n], tp[n].grad.numpy(), rtol=1e-10, atol=1e-13, err_msg=n)
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_the_cases_exercise_what_they_name():
    """Tokens really are dropped (and padded), the bias really changes the choice, groups really limit it."""
    for name in ("capacity-probs", "capacity-position-padded-gated-shared", "sigmoid-capacity-position"):
        moe, params, x, bias, _ = _setup(name)
        _, saved = moe_forward(x, params, moe, bias)
        _, free = moe_forward(x, params, _dropless(moe), bias)
        kept = saved.routing.routing_map & free.routing.routing_map
        assert kept.sum() < free.routing.routing_map.sum(), name  # some routes dropped
        if moe.moe_pad_expert_input_to_capacity:
            assert (saved.tokens_per_expert == saved.routing.capacity).all()
    moe, params, x, bias, _ = _setup("deepseek")
    _, biased = moe_forward(x, params, moe, bias)
    _, plain = moe_forward(x, params, moe, None)
    assert (biased.routing.routing_map != plain.routing.routing_map).any()
    groups = biased.routing.routing_map.reshape(-1, 4, 2).any(axis=-1).sum(axis=-1)
    assert (groups <= 2).all() and (plain.routing.routing_map.reshape(-1, 4, 2).any(axis=-1).sum(-1) <= 2).all()


def _directional(moe, params, x, bias, r, name, direction, eps=1e-5):
    def at(e):
        p = dict(params)
        if name == "x":
            return _objective(moe, p, x + e * direction, bias, r)[0]
        p[name] = params[name] + e * direction
        return _objective(moe, p, x, bias, r)[0]

    def central(e):
        return (at(e) - at(-e)) / (2 * e)
    return (4 * central(eps / 2) - central(eps)) / 3


@pytest.mark.parametrize("name", list(CONFIGS))
def test_backward_matches_finite_differences(name):
    """Each gradient on its own (the input's too) against central differences with a Richardson step."""
    moe, params, x, bias, r = _setup(name, seed=3)
    _, _, saved, grads, dx = _gradients(moe, params, x, bias, r)
    rng = np.random.default_rng(4)
    for n, g in list(grads.items()) + [("x", dx)]:
        direction = rng.standard_normal(g.shape)
        numeric = _directional(moe, params, x, bias, r, n, direction)
        assert float((g * direction).sum()) == pytest.approx(numeric, rel=1e-7, abs=1e-9), n


@pytest.mark.parametrize("name", ["softmax", "deepseek", "capacity-position-padded-gated-shared"])
def test_size_only_run_has_the_shapes_and_flops_of_the_real_one(name):
    moe, params, x, bias, r = _setup(name)
    fl = Flops()
    y, saved = moe_forward(x, params, moe, bias, fl=fl)
    moe_backward(r, saved, params, {n: np.zeros_like(p) for n, p in params.items()}, moe, fl=fl)
    routed = moe_forward(x, params, _dropless(moe), bias)[1].tokens_per_expert  # the routing before dropping
    mfl = Flops()
    mparams = {n: meta(p.shape, "bfloat16") for n, p in params.items()}
    my, msaved = moe_forward(meta(x.shape, "bfloat16"), mparams, moe, fl=mfl, routed_tokens_per_expert=routed)
    assert isinstance(my, Meta) and my.shape == y.shape and all(v is None for v in msaved.losses.values())
    assert set(msaved.losses) == set(saved.losses)
    np.testing.assert_array_equal(msaved.tokens_per_expert, saved.tokens_per_expert)
    mdx = moe_backward(meta(y.shape, "bfloat16"), msaved, mparams, dict(mparams), moe, fl=mfl)
    assert isinstance(mdx, Meta) and mdx.shape == x.shape
    assert mfl.total == fl.total > 0
