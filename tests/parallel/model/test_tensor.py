"""Meta tensors follow numpy's shape rules (checked against numpy itself on small arrays)."""
import numpy as np
import pytest

from simcomm import SizeOnly
from simcomm.parallel.model.tensor import Meta, concat, is_meta, meta, split, value, zeros


def same(m: Meta, a: np.ndarray):
    assert isinstance(m, Meta) and m.shape == a.shape


def test_meta_follows_numpy_shapes():
    a, b = np.ones((3, 1, 4)), np.ones((5, 4))
    ma, mb = Meta(a.shape, "float32"), Meta(b.shape, "float32")
    same(ma + mb, a + b)
    same(mb * 2.0, b * 2.0)
    same(ma @ mb.T, a @ b.T)
    same(np.exp(ma), np.exp(a))
    same(ma.reshape(-1, 2), a.reshape(-1, 2))
    same(ma.transpose(2, 0, 1), a.transpose(2, 0, 1))
    same(ma[:, 0, 1:3], a[:, 0, 1:3])
    same(ma.sum(axis=-1, keepdims=True), a.sum(axis=-1, keepdims=True))
    same(ma.max(axis=(0, 2)), a.max(axis=(0, 2)))
    same(concat([ma, ma], axis=1), np.concatenate([a, a], axis=1))
    assert [m.shape for m in split(mb, 5)] == [x.shape for x in np.split(b, 5)]
    x = ma
    x += a  # in place: nothing stored, shape checked
    assert x is ma
    with pytest.raises(ValueError):
        ma @ Meta((3, 3), "float32")
    with pytest.raises(ValueError):
        ma.reshape(5, 5)


def test_meta_is_a_size_only_tensor():
    m = meta((1024, 1024), "bfloat16")
    assert isinstance(m, SizeOnly) and m.nbytes == 2 << 20 and is_meta(np.ones(1), m)
    assert value(m.sum()) is None and value(np.float64(2.5)) == 2.5
    assert isinstance(zeros((2, 3), "float64", size_only=True), Meta) and zeros((2,), "float64").sum() == 0
