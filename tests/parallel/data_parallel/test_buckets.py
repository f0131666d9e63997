"""Gradient buckets: laws of the layout."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.parallel.data_parallel.buckets import make_buckets


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=12), cap=st.one_of(st.none(), st.integers(1, 120)),
       shards=st.integers(1, 5), alone=st.integers(0, 11))
def test_buckets_cover_every_parameter_once_in_order(sizes, cap, shards, alone):
    names = [f"p{i}" for i in range(len(sizes))]
    shapes = {n: (s,) for n, s in zip(names, sizes)}
    units = {n: f"u{i // 3}" for i, n in enumerate(names)}
    solo = {names[alone % len(names)]}
    buckets = make_buckets(names, shapes, units, cap, shards, 0, solo)
    assert [n for b in buckets for n in b.names] == names  # every parameter once, in gradient-ready order
    for b in buckets:
        assert b.numel == sum(math.prod(s) for s in b.shapes)
        assert b.padded % shards == 0 and 0 <= b.padded - b.numel < shards
        assert b.offsets == list(np.cumsum([0] + [math.prod(s) for s in b.shapes])[:-1])
        if cap is not None and len(b.names) > 1:  # a bucket closes once it reaches the cap
            assert sum(math.prod(s) for s in b.shapes[:-1]) < cap
        if solo & set(b.names):
            assert b.names == list(solo)
    shards_of = [make_buckets(names, shapes, units, cap, shards, i, solo) for i in range(shards)]
    for per_rank in zip(*shards_of):  # the shards of a bucket tile it
        bounds = [b.shard for b in per_rank]
        assert bounds[0][0] == 0 and bounds[-1][1] == per_rank[0].padded
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


def test_zero3_buckets_never_span_units():
    names = ["a", "b", "c", "d"]
    shapes = {n: (4,) for n in names}
    units = {"a": "x", "b": "x", "c": "y", "d": "y"}
    assert [b.names for b in make_buckets(names, shapes, units, None, 2, 0, by_unit=True)] == [["a", "b"], ["c", "d"]]
    assert [b.names for b in make_buckets(names, shapes, units, None, 2, 0)] == [names]


def test_views_share_the_flat_buffer():
    (b,) = make_buckets(["w", "v"], {"w": (2, 3), "v": (4,)}, {"w": "u", "v": "u"}, None, 4, 1)
    flat = np.arange(b.padded, dtype=float)
    views = b.views(flat)
    assert views["w"].shape == (2, 3) and views["v"].tolist() == [6, 7, 8, 9]
    views["v"][:] = 0
    assert flat[6:10].tolist() == [0, 0, 0, 0] and b.shard == (3, 6)
    assert b.flat_mask({"w": 1.0, "v": 0.0}, float).tolist() == [1] * 6 + [0] * 6
