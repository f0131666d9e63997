"""The router's laws: what a token's experts weigh, what dropping and padding do, balance, the expert bias."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.parallel.model.moe import (balanced_counts, expert_rows, get_capacity, init_moe_params,
                                        moe_backward, moe_forward, route, updated_expert_bias)
from simcomm.parallel.model.moe.layer import FC1, FC2
from simcomm.parallel.model.moe.router import softmax
from simcomm.parallel.model.tensor import meta

from .helpers import moe_config


@st.composite
def configs(draw, capacity=None):
    E = draw(st.integers(2, 8))
    k = draw(st.integers(1, E))
    fn = draw(st.sampled_from(["softmax", "sigmoid"]))
    pre = draw(st.booleans()) or (fn == "softmax" and k == 1)
    cf = draw(st.one_of(st.none(), st.floats(0.2, 2.0))) if capacity is None else \
        (draw(st.floats(0.2, 1.5)) if capacity else None)
    return moe_config(num_moe_experts=E, moe_ffn_hidden_size=3, moe_router_topk=k, moe_router_score_function=fn,
                     moe_router_pre_softmax=pre, moe_router_topk_scaling_factor=draw(st.sampled_from([None, 2.5])),
                     moe_expert_capacity_factor=cf, moe_token_drop_policy=draw(st.sampled_from(["probs", "position"])),
                     moe_pad_expert_input_to_capacity=cf is not None and draw(st.booleans()))


def _dropless(moe):
    return dataclasses.replace(moe, moe_expert_capacity_factor=None, moe_pad_expert_input_to_capacity=False)


def _logits(seed, T, E):
    return np.random.default_rng(seed).standard_normal((T, E)) * 2


@settings(max_examples=150, deadline=None)
@given(configs(), st.integers(1, 16), st.integers(0, 2 ** 31 - 1))
def test_a_tokens_weight_is_the_sum_of_its_kept_top_k_probabilities(moe, T, seed):
    logits = _logits(seed, T, moe.num_moe_experts)
    free, r = route(logits, _dropless(moe), T), route(logits, moe, T)
    k, scale = moe.moe_router_topk, moe.moe_router_topk_scaling_factor or 1.0
    assert (free.routing_map.sum(axis=1) == k).all()
    kept = r.routing_map & free.routing_map  # dropping only ever removes routes
    np.testing.assert_array_equal(r.probs, free.probs * kept)  # and never renormalises
    np.testing.assert_allclose(r.probs.sum(axis=1), (free.probs * kept).sum(axis=1))
    if moe.moe_router_score_function == "sigmoid":
        chosen = np.sort(1 / (1 + np.exp(-logits)), axis=1)[:, -k:]
        expected = np.ones(T) if k > 1 else chosen[:, 0]  # normalised over the k chosen unless k = 1
    elif moe.moe_router_pre_softmax:
        expected = np.sort(softmax(logits), axis=1)[:, -k:].sum(axis=1)
    else:
        expected = np.ones(T)  # a softmax over the k chosen
    np.testing.assert_allclose(free.probs.sum(axis=1), scale * expected, rtol=1e-12)


@settings(max_examples=100, deadline=None)
@given(configs(capacity=True), st.integers(1, 16), st.integers(0, 2 ** 31 - 1))
def test_capacity_bounds_every_expert_and_padding_fills_it(moe, T, seed):
    E, k = moe.num_moe_experts, moe.moe_router_topk
    logits = _logits(seed, T, E)
    free, r = route(logits, _dropless(moe), T), route(logits, moe, T)
    cap = get_capacity(T * k, E, moe.moe_expert_capacity_factor)
    assert r.capacity == cap
    rows, capacity = expert_rows(free.tokens_per_expert, T, moe)  # what a size-only run computes from counts
    assert capacity == cap and rows.tolist() == r.tokens_per_expert.tolist()
    if moe.moe_pad_expert_input_to_capacity:
        assert (r.tokens_per_expert == min(cap, T)).all()
        assert (r.probs[r.routing_map & ~free.routing_map] == 0).all()  # padding rows weigh nothing
    else:
        np.testing.assert_array_equal(r.tokens_per_expert, np.minimum(free.tokens_per_expert, cap))
    kept = r.routing_map & free.routing_map
    for e in range(E):
        routed, kept_e = np.flatnonzero(free.routing_map[:, e]), np.flatnonzero(kept[:, e])
        if moe.moe_token_drop_policy == "position":
            np.testing.assert_array_equal(kept_e, routed[:cap])  # the earliest tokens stay
        elif len(kept_e) < len(routed):  # the most probable stay
            dropped = np.setdiff1d(routed, kept_e)
            assert free.probs[kept_e, e].min() >= free.probs[dropped, e].max()


@settings(max_examples=40, deadline=None)
@given(configs(capacity=True), st.integers(2, 10), st.integers(0, 2 ** 31 - 1))
def test_dropped_routes_contribute_nothing_and_padding_changes_no_number(moe, T, seed):
    """The layer's output is each token's kept experts weighted by their probabilities (zero for a token whose
    every route was dropped); padded rows (probability 0) change neither outputs nor gradients."""
    h = 5
    moe = dataclasses.replace(moe, moe_pad_expert_input_to_capacity=False)
    params = init_moe_params(h, moe, seed=seed % 1000, std=0.7)
    x = np.random.default_rng(seed).standard_normal((T, 1, h))
    y, saved = moe_forward(x, params, moe)
    x2 = x.reshape(T, h)
    expected = np.zeros_like(x2)
    for e in range(moe.num_moe_experts):
        a = x2 @ params[FC1][e]
        act = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))  # tanh GELU
        expected += saved.routing.probs[:, e:e + 1] * (act @ params[FC2][e])
    np.testing.assert_allclose(y.reshape(T, h), expected, rtol=1e-12, atol=1e-14)
    assert (y.reshape(T, h)[~saved.routing.routing_map.any(axis=1)] == 0).all()
    padded = dataclasses.replace(moe, moe_pad_expert_input_to_capacity=True)
    yp, saved_p = moe_forward(x, params, padded)
    np.testing.assert_allclose(yp, y, rtol=1e-13, atol=1e-15)
    dy = np.random.default_rng(seed + 1).standard_normal(y.shape)
    g, gp = ({n: np.zeros_like(p) for n, p in params.items()} for _ in range(2))
    dx, dxp = moe_backward(dy, saved, params, g, moe), moe_backward(dy, saved_p, params, gp, padded)
    np.testing.assert_allclose(dxp, dx, rtol=1e-12, atol=1e-14)
    for n in g:
        np.testing.assert_allclose(gp[n], g[n], rtol=1e-12, atol=1e-14, err_msg=n)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8), st.data())
def test_a_balanced_router_gives_every_expert_the_same_load_and_the_aux_loss_its_coefficient(E, data):
    """Token t prefers experts t, t+1, ..., t+k-1 (mod E): over n E tokens each expert gets n k of them, and the
    switch loss of a balanced routing is exactly its coefficient, whatever the scores."""
    k, n = data.draw(st.integers(1, E)), data.draw(st.integers(1, 4))
    fn = data.draw(st.sampled_from(["softmax", "sigmoid"]))
    moe = moe_config(num_moe_experts=E, moe_ffn_hidden_size=2, moe_router_topk=k, moe_router_score_function=fn,
                    moe_router_pre_softmax=k == 1, moe_aux_loss_coeff=0.3)
    T = n * E
    t, e = np.arange(T)[:, None], np.arange(E)[None, :]
    logits = -((e - t) % E) * 1.0 + data.draw(st.floats(-2, 2))
    r = route(logits, moe, seq_length=T)
    assert (r.tokens_per_expert == n * k).all()
    np.testing.assert_array_equal(r.tokens_per_expert, balanced_counts(T, k, E))
    assert r.losses["load_balancing_loss"] == pytest.approx(0.3, rel=1e-12)


def test_balanced_counts_spread_the_remainder():
    assert balanced_counts(5, 2, 4).tolist() == [3, 3, 2, 2]
    assert balanced_counts(8, 2, 4).tolist() == [4] * 4


def test_the_expert_bias_chooses_but_never_weighs():
    moe = moe_config(num_moe_experts=6, moe_ffn_hidden_size=2, moe_router_topk=2, moe_router_score_function="sigmoid",
                    moe_router_enable_expert_bias=True)
    logits = _logits(5, 20, 6)
    bias = np.array([10.0, 0, 0, 0, 0, 0])  # expert 0 is everyone's choice
    r = route(logits, moe, 20, expert_bias=bias)
    assert r.routing_map[:, 0].all() and (r.routing_map.sum(axis=1) == 2).all()
    s = 1 / (1 + np.exp(-logits))
    chosen = np.where(r.routing_map, s, 0)
    np.testing.assert_allclose(r.probs, chosen / chosen.sum(axis=1, keepdims=True), rtol=1e-14)
    assert not r.losses  # no aux loss asked for


def test_the_bias_update_lifts_the_idle_and_lowers_the_busy():
    bias = np.zeros(4, np.float32)
    new = updated_expert_bias(bias, [10, 2, 5, 3], 1e-3)  # mean 5
    assert new.dtype == np.float32
    np.testing.assert_allclose(new, [-1e-3, 1e-3, 0, 1e-3])


def test_the_bias_balances_a_skewed_router_over_steps():
    """Aux-loss-free balancing (DeepSeek-V3): a router that favours some experts is evened out by the bias alone."""
    E, T = 8, 1024
    moe = moe_config(num_moe_experts=E, moe_ffn_hidden_size=2, moe_router_topk=2, moe_router_score_function="sigmoid",
                    moe_router_enable_expert_bias=True, moe_router_bias_update_rate=0.005)
    rng = np.random.default_rng(0)
    skew = np.linspace(1.5, -1.5, E)
    bias = np.zeros(E)
    spread = []
    for _ in range(200):
        r = route(rng.standard_normal((T, E)) + skew, moe, T, expert_bias=bias)
        spread.append(r.tokens_per_expert.max() / r.tokens_per_expert.mean())
        bias = updated_expert_bias(bias, r.tokens_per_expert, moe.moe_router_bias_update_rate)
    assert spread[0] > 2.5 and np.mean(spread[-20:]) < 1.15  # busiest / mean expert load


def test_group_limited_routing_keeps_tokens_within_their_groups():
    moe = moe_config(num_moe_experts=16, moe_ffn_hidden_size=2, moe_router_topk=4, moe_router_score_function="sigmoid",
                    moe_router_num_groups=4, moe_router_group_topk=2)
    logits = _logits(1, 50, 16)
    r = route(logits, moe, 50)
    groups_used = r.routing_map.reshape(50, 4, 4).any(axis=-1)
    assert (groups_used.sum(axis=1) <= 2).all()
    # the chosen groups are those with the largest sum of their top-2 scores
    s = 1 / (1 + np.exp(-logits))
    best = np.sort(s.reshape(50, 4, 4), axis=-1)[..., -2:].sum(axis=-1)
    top_groups = np.argsort(-best, axis=1)[:, :2]
    for t in range(50):
        assert set(np.flatnonzero(groups_used[t])) <= set(top_groups[t])
    plain = route(logits, moe_config(num_moe_experts=16, moe_ffn_hidden_size=2, moe_router_topk=4,
                                    moe_router_score_function="sigmoid"), 50)
    assert (plain.routing_map.reshape(50, 4, 4).any(axis=-1).sum(axis=1) > 2).any()  # the limit bites


def test_size_only_routing_takes_the_load_as_given():
    moe = moe_config(num_moe_experts=4, moe_ffn_hidden_size=2, moe_router_topk=2, moe_expert_capacity_factor=1.0)
    r = route(meta((16, 4)), moe, 16, routed_tokens_per_expert=[14, 10, 4, 4])
    assert r.tokens_per_expert.tolist() == [8, 8, 4, 4] and r.capacity == 8
    assert route(meta((16, 4)), moe, 16).tokens_per_expert.tolist() == [8] * 4
    with pytest.raises(Exception, match="4 counts"):
        route(meta((16, 4)), moe, 16, routed_tokens_per_expert=[1, 2])
