"""The causal load-balanced split, and ring attention's block maths, against plain causal attention."""
import numpy as np
import pytest

from simcomm.parallel.context_parallel.split import causal_work, load_balanced_positions
from simcomm.parallel.dims import LayoutError
from simcomm.parallel.model import layers as L


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_split_covers_the_sequence_and_balances_causal_work(cp):
    s = 24
    parts = [load_balanced_positions(s, cp, r) for r in range(cp)]
    assert sorted(np.concatenate(parts).tolist()) == list(range(s))
    assert len({causal_work(s, cp, r) for r in range(cp)}) == 1  # the same attention work on every rank
    if cp > 1:
        chunk = s // (2 * cp)
        assert parts[0][:chunk].tolist() == list(range(chunk))  # rank 0: the first and the last chunk
        assert parts[0][chunk:].tolist() == list(range(s - chunk, s))
    with pytest.raises(LayoutError, match="not divisible by 10"):
        load_balanced_positions(24, 5, 0)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_blocks_merged_by_log_sum_exp_equal_whole_attention(groups):
    rng = np.random.default_rng(0)
    s, b, heads, d, cp = 8, 2, 4, 3, 2
    q = rng.standard_normal((s, b, heads, d))
    k, v = rng.standard_normal((2, s, b, groups, d))
    pos = np.arange(s)
    whole, lse_whole = L.attention_block(q, k, v, pos, pos, 0.5)
    # the queries of rank 0 of a 2-way load-balanced split, against each rank's key block in turn
    mine = load_balanced_positions(s, cp, 0)
    o = lse = None
    for r in range(cp):
        kp = load_balanced_positions(s, cp, r)
        ob, lb = L.attention_block(q[mine], k[kp], v[kp], mine, kp, 0.5)
        o, lse = (ob, lb) if o is None else L.merge_attention(o, lse, ob, lb)
    np.testing.assert_allclose(o, whole[mine], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(lse, lse_whole[mine], rtol=1e-13)
    # a block no query can see contributes nothing (its lse is -inf)
    ob, lb = L.attention_block(q[:2], k[4:], v[4:], pos[:2], pos[4:], 0.5)
    assert np.isneginf(lb).all() and not ob.any()
    merged, lse2 = L.merge_attention(whole[:2], lse_whole[:2], ob, lb)
    np.testing.assert_array_equal(merged, whole[:2])


def test_vocab_parallel_cross_entropy_equals_whole():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((4, 3, 12))
    targets = rng.integers(0, 12, size=(4, 3))
    whole, cache = L.vocab_parallel_cross_entropy(logits, targets, 0, lambda x, op: x)
    shards = np.split(logits, 3, axis=-1)
    # combine by hand: max, then sums, over the three shards
    m = np.max([s.max(-1) for s in shards], axis=0)
    tz = sum(np.where((targets >= 4 * i) & (targets < 4 * i + 4),
                      np.take_along_axis(s - m[..., None], np.clip(targets - 4 * i, 0, 3)[..., None], -1)[..., 0], 0)
             for i, s in enumerate(shards))
    total = sum(np.exp(s - m[..., None]).sum(-1) for s in shards)
    np.testing.assert_allclose(np.log(total) - tz, whole, rtol=1e-13)
    ref = -np.log(np.take_along_axis(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True),
                                     targets[..., None], -1)[..., 0])
    np.testing.assert_allclose(whole, ref, rtol=1e-12)
    grad = L.vocab_parallel_cross_entropy_backward(np.ones((4, 3)), cache)
    np.testing.assert_allclose(grad.sum(-1), 0, atol=1e-15)  # softmax minus one-hot
