"""The token permutation's laws, and the regrouping expert parallelism will do: rows sent to the ranks that hold
their experts, computed there, sent back and combined, equal every expert computed on one rank."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.parallel.model.layers import Flops
from simcomm.parallel.model.moe import (chunk_orders, experts_backward, experts_forward,
                                        init_moe_params, permutation, permute, permute_probs, route,
                                        sort_chunks_by_index, splits_by_rank, unpermute, unpermute_probs)
from simcomm.parallel.model.moe.layer import FC1, FC2
from simcomm.parallel.model.tensor import meta

from .helpers import moe_config


@st.composite
def routing_maps(draw, max_tokens=12, max_experts=6):
    T = draw(st.integers(1, max_tokens))
    E = draw(st.integers(1, max_experts))
    bits = draw(st.lists(st.booleans(), min_size=T * E, max_size=T * E))
    return np.array(bits, bool).reshape(T, E)


@settings(max_examples=100, deadline=None)
@given(routing_maps(), st.integers(0, 2 ** 31 - 1))
def test_permuted_layout_is_expert_major_in_token_order(routing_map, seed):
    perm = permutation(routing_map)
    T, E = routing_map.shape
    np.testing.assert_array_equal(perm.tokens_per_expert, routing_map.sum(axis=0))
    assert perm.num_rows == routing_map.sum()
    experts = perm.expert_of_row
    assert (np.diff(experts) >= 0).all()  # expert 0's rows first, ...
    for e in range(E):
        tokens = perm.sorted_indices[experts == e]
        np.testing.assert_array_equal(tokens, np.flatnonzero(routing_map[:, e]))  # ... each in token order
    x = np.random.default_rng(seed).standard_normal((T, 3))
    np.testing.assert_array_equal(permute(x, perm), x[perm.sorted_indices])


@settings(max_examples=100, deadline=None)
@given(routing_maps(), st.integers(0, 2 ** 31 - 1))
def test_permute_and_unpermute_are_adjoint_and_invert_each_other(routing_map, seed):
    rng = np.random.default_rng(seed)
    perm = permutation(routing_map)
    T, E = routing_map.shape
    x, rows = rng.standard_normal((T, 4)), rng.standard_normal((perm.num_rows, 4))
    assert np.isclose((permute(x, perm) * rows).sum(), (x * unpermute(rows, perm)).sum())
    # each token comes back once per expert it went to: the identity when every token has one route
    np.testing.assert_allclose(unpermute(permute(x, perm), perm), x * routing_map.sum(axis=1)[:, None])
    one = np.zeros_like(routing_map)
    one[np.arange(T), rng.integers(0, E, T)] = True
    single = permutation(one)
    np.testing.assert_array_equal(unpermute(permute(x, single), single), x)
    # and the rows of one route each come back unchanged
    np.testing.assert_array_equal(permute(unpermute(permute(x, single), single), single), permute(x, single))
    probs = rng.standard_normal((T, E))
    np.testing.assert_array_equal(unpermute_probs(permute_probs(probs, perm), perm), probs * routing_map)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2 ** 31 - 1))
def test_sorting_chunks_by_local_expert_and_back_is_the_identity(local_experts, ep, seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 4, ep * local_experts)
    rows = rng.standard_normal((int(sizes.sum()), 2))
    to_experts, back = chunk_orders(local_experts, ep)
    sorted_rows = sort_chunks_by_index(rows, sizes, to_experts)
    np.testing.assert_array_equal(sort_chunks_by_index(sorted_rows, sizes[to_experts], back), rows)
    assert sort_chunks_by_index(meta(rows.shape), sizes, to_experts).shape == rows.shape  # size-only too


def test_expert_parallel_exchange_equals_one_rank():
    """Four ranks, eight experts, two per rank, each rank with its own tokens: permute, send each rank its
    experts' rows (all_to_all, simulated), regroup by local expert, run, regroup back, return, unpermute. Outputs,
    expert gradients and FLOPs equal each rank running all eight experts on its own tokens."""
    ep, E, h = 4, 8, 6
    moe = moe_config(num_moe_experts=E, moe_ffn_hidden_size=5, moe_router_topk=3, swiglu=True)
    params = init_moe_params(h, moe, seed=1, std=0.5)
    rng = np.random.default_rng(2)
    tokens = [rng.standard_normal((7 + r, h)) for r in range(ep)]  # uneven token counts per rank too
    douts = [rng.standard_normal(t.shape) for t in tokens]
    serial_grads = {FC1: np.zeros_like(params[FC1]), FC2: np.zeros_like(params[FC2])}
    serial_out, sent = [], []
    fl_serial = Flops()
    for x, dout in zip(tokens, douts):
        routing = route(x @ params["router.weight"], moe, seq_length=len(x))
        perm = permutation(routing.routing_map)
        rows, probs = permute(x, perm), permute_probs(routing.probs, perm)
        y, cache = experts_forward(rows, perm.tokens_per_expert, probs, params[FC1], params[FC2], True, fl_serial)
        experts_backward(permute(dout, perm), cache, params[FC1], params[FC2], serial_grads[FC1],
                         serial_grads[FC2], True, fl_serial)
        serial_out.append(unpermute(y, perm))
        sent.append((perm, rows, probs, permute(dout, perm)))

    local = E // ep
    to_experts, back = chunk_orders(local, ep)
    ep_grads = {FC1: np.zeros_like(params[FC1]), FC2: np.zeros_like(params[FC2])}
    returned = [[None] * ep for _ in range(ep)]  # returned[src][dst]: rows dst computed for src
    fl_ep = Flops()
    for dst in range(ep):
        experts = slice(dst * local, (dst + 1) * local)

        def receive(i):  # all_to_all: from every source its rows for dst's experts, in source-rank order
            out = []
            for perm, *arrays in sent:
                starts = np.concatenate([[0], np.cumsum(splits_by_rank(perm.tokens_per_expert, ep))])
                out.append(arrays[i][starts[dst]:starts[dst + 1]])
            return np.concatenate(out)

        counts = np.concatenate([perm.tokens_per_expert[experts] for perm, *_ in sent])  # [src][local expert]
        rows, probs, drows = (sort_chunks_by_index(receive(i), counts, to_experts) for i in range(3))
        per_expert = counts.reshape(ep, local).sum(axis=0)
        w1, w2 = params[FC1][experts], params[FC2][experts]
        y, cache = experts_forward(rows, per_expert, probs, w1, w2, True, fl_ep)
        experts_backward(drows, cache, w1, w2, ep_grads[FC1][experts], ep_grads[FC2][experts], True, fl_ep)
        y = sort_chunks_by_index(y, counts[to_experts], back)
        starts = np.concatenate([[0], np.cumsum(counts.reshape(ep, local).sum(axis=1))])
        for src in range(ep):
            returned[src][dst] = y[starts[src]:starts[src + 1]]
    for src in range(ep):
        out = unpermute(np.concatenate(returned[src]), sent[src][0])
        np.testing.assert_allclose(out, serial_out[src], rtol=1e-13, atol=1e-14)
    for n in ep_grads:
        np.testing.assert_allclose(ep_grads[n], serial_grads[n], rtol=1e-12, atol=1e-14)
    assert fl_ep.total == fl_serial.total
