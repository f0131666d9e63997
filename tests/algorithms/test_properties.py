"""Numerical properties of every registered algorithm, group-level with numpy rows (hypothesis).

World sizes 1..64 (biased small), every algorithm registered for the collective that can run the group (NVLS on
one NVLS node, NVLS-Tree on NVLS nodes holding as many of the group's ranks each, hierarchical on whole nodes),
integer/float/bool dtypes and every reduction op that fits them.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simcomm.algorithms import ALGORITHMS, Buffers, Collective, ReduceOp, run_collective
from simcomm.algorithms.tuner import why_not
from simcomm.engine import Simulation
from simcomm.hardware import build_cluster

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)

OPS = {
    "int": ["SUM", "MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR", "AVG"],
    "float": ["SUM", "MAX", "MIN", "PRODUCT", "AVG"],
    "bool": ["SUM", "MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR"],
}
DTYPES = {"int32": "int", "int64": "int", "float32": "float", "float64": "float", "bool": "bool"}


@functools.lru_cache(maxsize=None)
def _cluster(flavour: str, nodes: int):
    if flavour == "gpu":
        return build_cluster("hgx-h100", nodes=nodes)
    rpn = int(flavour[3:])  # "cpu2", "cpu3": small nodes so groups span several of them
    return build_cluster("cpu-host", nodes=nodes, ranks_per_node=rpn)


def cluster_for(n: int, flavour: str):
    per = 8 if flavour == "gpu" else int(flavour[3:])
    return _cluster(flavour, max(1, -(-n // per)))


def run(cluster, kind, n, count, dtype, op, algorithm, rows, root=0, splits=None):
    sim = Simulation(cluster, "steps")
    coll = Collective(kind, np.arange(n), count, np.dtype(dtype), getattr(ReduceOp, op), root, splits)
    proc, buf, choice = run_collective(sim, coll, rows, algorithm)
    sim.env.run(proc)
    assert choice.algorithm == algorithm
    return buf.rows


def algorithms(cluster, kind, n, count=1):
    coll = Collective(kind, np.arange(n), count)
    return [a for a in sorted(ALGORITHMS[kind]) if why_not(cluster, coll, a) is None]


def make_rows(rng, shape, dtype, op):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dt.kind == "i":
        lo, hi = (-2, 3) if op == "PRODUCT" else (-50, 51)
        return rng.integers(lo, hi, size=shape).astype(dt)
    if op == "PRODUCT":
        return rng.uniform(0.8, 1.25, size=shape).astype(dt)
    return rng.uniform(-4, 4, size=shape).astype(dt)


def reference(op: str, x: np.ndarray) -> np.ndarray:
    """The reduction over axis 0 (ranks) computed independently with numpy."""
    n = len(x)
    if x.dtype == np.bool_:
        if op in ("SUM", "MAX", "BOR", "AVG"):
            return x.any(axis=0)
        if op in ("PRODUCT", "MIN", "BAND"):
            return x.all(axis=0)
        return np.logical_xor.reduce(x, axis=0)
    if op == "SUM":
        return x.sum(axis=0, dtype=x.dtype)
    if op == "AVG":
        if x.dtype.kind == "f":
            return (x.astype(np.float64).sum(axis=0) / n).astype(x.dtype)
        s = x.sum(axis=0, dtype=x.dtype).astype(np.int64)
        return (np.sign(s) * (np.abs(s) // n)).astype(x.dtype)  # C division truncates toward zero
    if op == "PRODUCT":
        return np.prod(x, axis=0, dtype=x.dtype)
    return {"MAX": np.max, "MIN": np.min, "BAND": np.bitwise_and.reduce, "BOR": np.bitwise_or.reduce,
            "BXOR": np.bitwise_xor.reduce}[op](x, axis=0)


def assert_close(got, want, dtype, n, what=""):
    got, want = np.asarray(got), np.asarray(want)
    if np.dtype(dtype).kind == "f":
        tol = 1e-4 if np.dtype(dtype) == np.float32 else 1e-10
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 8 * n, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


sizes = st.one_of(st.integers(1, 9), st.integers(1, 64))
flavours = st.sampled_from(["gpu", "cpu2", "cpu3"])
dtype_ops = st.sampled_from(sorted(DTYPES)).flatmap(
    lambda d: st.tuples(st.just(d), st.sampled_from(OPS[DTYPES[d]])))


@settings(max_examples=40, **SETTINGS)
@given(n=sizes, flavour=flavours, dtype_op=dtype_ops, count=st.integers(1, 13), seed=st.integers(0, 2**31))
def test_all_reduce_every_algorithm_agrees_with_numpy(n, flavour, dtype_op, count, seed):
    dtype, op = dtype_op
    c = cluster_for(n, flavour)
    x = make_rows(np.random.default_rng(seed), (n, count), dtype, op)
    want = reference(op, x)
    results = {}
    for a in algorithms(c, "all_reduce", n):
        out = run(c, "all_reduce", n, count, dtype, op, a, x.copy())
        assert out.dtype == x.dtype
        assert (out == out[0]).all(), f"{a}: ranks disagree"  # exactly equal, floats included
        assert_close(out[0], want, dtype, n, f"{a} vs numpy")
        results[a] = out[0]
    base = results.pop("ring")
    for a, r in results.items():
        assert_close(r, base, dtype, n, f"{a} vs ring")


@settings(max_examples=30, **SETTINGS)
@given(n=sizes, flavour=flavours, dtype_op=dtype_ops, count=st.integers(1, 5), seed=st.integers(0, 2**31),
       pick=st.integers(0, 10))
def test_reduce_scatter_then_all_gather_is_all_reduce(n, flavour, dtype_op, count, seed, pick):
    dtype, op = dtype_op
    c = cluster_for(n, flavour)
    x = make_rows(np.random.default_rng(seed), (n, n * count), dtype, op)
    whole = run(c, "all_reduce", n, n * count, dtype, op, "ring", x.copy())
    ags = algorithms(c, "all_gather", n)
    for i, a in enumerate(algorithms(c, "reduce_scatter", n)):
        rs = run(c, "reduce_scatter", n, count, dtype, op, a, x.copy())
        want = reference(op, x)
        for r in range(n):
            assert_close(rs[r, r * count:(r + 1) * count], want[r * count:(r + 1) * count], dtype, n, f"{a} rank {r}")
        ag = ags[(pick + i) % len(ags)]
        out = run(c, "all_gather", n, count, dtype, "SUM", ag, rs.copy())
        assert_close(out, whole, dtype, n, f"reduce_scatter {a} + all_gather {ag}")


@settings(max_examples=30, **SETTINGS)
@given(n=sizes, flavour=flavours, dtype=st.sampled_from(sorted(DTYPES)), count=st.integers(1, 6),
       seed=st.integers(0, 2**31))
def test_all_gather_every_algorithm(n, flavour, dtype, count, seed):
    c = cluster_for(n, flavour)
    x = make_rows(np.random.default_rng(seed), (n, n * count), dtype, "SUM")
    want = np.concatenate([x[i, i * count:(i + 1) * count] for i in range(n)])
    for a in algorithms(c, "all_gather", n):
        out = run(c, "all_gather", n, count, dtype, "SUM", a, x.copy())
        np.testing.assert_array_equal(out, np.broadcast_to(want, out.shape), err_msg=a)


@settings(max_examples=25, **SETTINGS)
@given(n=sizes, flavour=flavours, dtype=st.sampled_from(sorted(DTYPES)), count=st.integers(1, 9),
       seed=st.integers(0, 2**31))
def test_broadcast_from_every_root(n, flavour, dtype, count, seed):
    c = cluster_for(n, flavour)
    x = make_rows(np.random.default_rng(seed), (n, count), dtype, "SUM")
    # every root on small groups; on big ones the ends, the middle and one drawn at random (keeps this quick)
    roots = range(n) if n <= 12 else sorted({0, 1, n // 2, n - 1, seed % n})
    for a in algorithms(c, "broadcast", n):
        for root in roots:
            out = run(c, "broadcast", n, count, dtype, "SUM", a, x.copy(), root=root)
            np.testing.assert_array_equal(out, np.broadcast_to(x[root], out.shape), err_msg=f"{a} root {root}")


@settings(max_examples=30, **SETTINGS)
@given(n=sizes, flavour=flavours, dtype_op=dtype_ops, count=st.integers(1, 9), seed=st.integers(0, 2**31),
       root_pick=st.integers(0, 63))
def test_reduce_matches_numpy_on_the_root(n, flavour, dtype_op, count, seed, root_pick):
    dtype, op = dtype_op
    c = cluster_for(n, flavour)
    root = root_pick % n
    x = make_rows(np.random.default_rng(seed), (n, count), dtype, op)
    for a in algorithms(c, "reduce", n):
        out = run(c, "reduce", n, count, dtype, op, a, x.copy(), root=root)
        assert_close(out[root], reference(op, x), dtype, n, f"{a} root {root}")


@settings(max_examples=25, **SETTINGS)
@given(n=sizes, flavour=flavours, count=st.integers(1, 5), seed=st.integers(0, 2**31), root_pick=st.integers(0, 63))
def test_scatter_then_gather_is_identity(n, flavour, count, seed, root_pick):
    c = cluster_for(n, flavour)
    root = root_pick % n
    x = np.random.default_rng(seed).integers(0, 1000, size=(n, n * count)).astype(np.int64)
    rows = np.zeros_like(x)
    rows[root] = x[root]
    for sa in algorithms(c, "scatter", n):
        scattered = run(c, "scatter", n, count, "int64", "SUM", sa, rows.copy(), root=root)
        for i in range(n):
            np.testing.assert_array_equal(scattered[i, i * count:(i + 1) * count], x[root, i * count:(i + 1) * count])
        for ga in algorithms(c, "gather", n):
            back = scattered.copy()
            back[root] = 0
            back[root, root * count:(root + 1) * count] = x[root, root * count:(root + 1) * count]
            out = run(c, "gather", n, count, "int64", "SUM", ga, back, root=root)
            np.testing.assert_array_equal(out[root], x[root], err_msg=f"scatter {sa} + gather {ga}")


def _a2a(c, n, count, algorithm, blocks_in, splits=None):
    blocks_out = [[np.zeros_like(blocks_in[i][j]) for i in range(n)] for j in range(n)]
    run(c, "all_to_all", n, count, "int64", "SUM", algorithm, Buffers((blocks_in, blocks_out), ReduceOp.SUM),
        splits=splits)
    return blocks_out


@settings(max_examples=25, **SETTINGS)
@given(n=sizes, flavour=flavours, count=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_all_to_all_twice_is_identity(n, flavour, count, seed):
    c = cluster_for(n, flavour)
    rng = np.random.default_rng(seed)
    blocks = [[rng.integers(0, 10**6, size=count) for _ in range(n)] for _ in range(n)]
    for a in algorithms(c, "all_to_all", n):
        once = _a2a(c, n, count, a, blocks)
        for i in range(n):
            for j in range(n):
                np.testing.assert_array_equal(once[j][i], blocks[i][j], err_msg=f"{a}: {i}->{j}")
        twice = _a2a(c, n, count, a, once)
        for i in range(n):
            for j in range(n):
                np.testing.assert_array_equal(twice[i][j], blocks[i][j], err_msg=f"{a} twice")


@settings(max_examples=20, **SETTINGS)
@given(n=st.integers(1, 12), seed=st.integers(0, 2**31))
def test_all_to_all_uneven_splits(n, seed):
    c = cluster_for(n, "cpu3")
    rng = np.random.default_rng(seed)
    splits = rng.integers(0, 4, size=(n, n))
    blocks = [[rng.integers(0, 10**6, size=int(splits[i, j])) for j in range(n)] for i in range(n)]
    for a in algorithms(c, "all_to_all", n):
        out = _a2a(c, n, 1, a, blocks, splits)
        for i in range(n):
            for j in range(n):
                np.testing.assert_array_equal(out[j][i], blocks[i][j], err_msg=f"{a}: {i}->{j}")


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 16, 24, 40, 64])
def test_every_all_reduce_algorithm_on_power_and_odd_sizes_float(n):
    """Deterministic companion of the property tests: float AVG (pre-multiplied) at the sizes that matter."""
    c = cluster_for(n, "gpu")
    x = make_rows(np.random.default_rng(n), (n, 37), "float32", "AVG")
    for a in algorithms(c, "all_reduce", n):
        out = run(c, "all_reduce", n, 37, "float32", "AVG", a, x.copy())
        assert (out == out[0]).all()
        assert_close(out[0], reference("AVG", x), "float32", n, a)


def test_applicability_per_group():
    """hierarchical needs whole nodes, NVLS one NVLS node: the property tests exercise them only there."""
    gpu1, gpu2 = _cluster("gpu", 1), _cluster("gpu", 2)
    assert "nvls" in algorithms(gpu1, "all_reduce", 8) and "nvls" in algorithms(gpu1, "all_reduce", 5)
    assert "nvls" not in algorithms(gpu2, "all_reduce", 16)
    assert "hierarchical" in algorithms(gpu2, "all_reduce", 16)
    assert "hierarchical" not in algorithms(gpu2, "all_reduce", 12)
    assert "hierarchical" in algorithms(_cluster("cpu3", 4), "all_reduce", 12)
    assert "nvls_tree" in algorithms(gpu2, "all_reduce", 16) and "nvls_tree" not in algorithms(gpu2, "all_reduce", 12)
    assert "nvls_tree" not in algorithms(gpu1, "all_reduce", 8)


@settings(max_examples=30, **SETTINGS)
@given(nodes=st.integers(2, 5), per=st.integers(2, 8), dtype_op=dtype_ops, count=st.integers(1, 40),
       seed=st.integers(0, 2**31), shuffle=st.booleans())
def test_nvls_tree_on_any_equal_share_of_nodes(nodes, per, dtype_op, count, seed, shuffle):
    """NVLS-Tree on `per` GPUs (any of them) of each of `nodes` nodes (any of them), group ranks in any order."""
    dtype, op = dtype_op
    c = _cluster("gpu", 6)
    rng = np.random.default_rng(seed)
    ranks = np.concatenate([8 * k + rng.permutation(8)[:per] for k in sorted(rng.permutation(6)[:nodes])])
    if shuffle:
        ranks = ranks[rng.permutation(len(ranks))]
    n = len(ranks)
    x = make_rows(rng, (n, count), dtype, op)
    got = {}
    for a in ("ring", "nvls_tree"):
        sim = Simulation(c, "steps")
        proc, buf, choice = run_collective(sim, Collective("all_reduce", ranks, count, np.dtype(dtype),
                                                           getattr(ReduceOp, op)), x.copy(), a)
        sim.env.run(proc)
        assert choice.algorithm == a and (buf.rows == buf.rows[0]).all()
        got[a] = buf.rows[0]
    assert_close(got["nvls_tree"], reference(op, x), dtype, n, "nvls_tree vs numpy")
    assert_close(got["nvls_tree"], got["ring"], dtype, n, "nvls_tree vs ring")


@pytest.mark.parametrize("nodes, per, count", [(2, 2, 600_001), (3, 3, 300_007), (4, 8, 1_048_583)])
def test_nvls_tree_pipelined_over_many_slices(nodes, per, count):
    """Large enough for several slices (a steady state timed as one repeated step): exact int64 sums."""
    c = _cluster("gpu", 4)
    ranks = (8 * np.arange(nodes)[:, None] + np.arange(per)).reshape(-1)
    x = np.random.default_rng(count).integers(-1000, 1000, size=(len(ranks), count))
    sim = Simulation(c, "steps")
    proc, buf, _ = run_collective(sim, Collective("all_reduce", ranks, count, np.dtype("int64")), x.copy(),
                                  "nvls_tree")
    sim.env.run(proc)
    np.testing.assert_array_equal(buf.rows, np.broadcast_to(x.sum(axis=0), x.shape))


@settings(max_examples=20, **SETTINGS)
@given(k=st.integers(1, 24), seed=st.integers(0, 2**31), whole=st.booleans())
def test_groups_in_any_order_on_any_ranks(k, seed, whole):
    """Group rank i is cluster rank ranks[i]: shuffled whole nodes (hierarchical applies) or a random subset."""
    c = _cluster("cpu3", 8)
    rng = np.random.default_rng(seed)
    if whole:  # whole nodes, shuffled
        nodes = rng.permutation(8)[:max(1, k // 3)]
        ranks = (3 * nodes[:, None] + np.arange(3)).reshape(-1)
        ranks = ranks[rng.permutation(len(ranks))]
    else:
        ranks = rng.permutation(c.num_ranks)[:k]
    n = len(ranks)
    x = make_rows(rng, (n, 7), "int64", "SUM")
    coll = Collective("all_reduce", ranks, 7, np.dtype("int64"))
    names = [a for a in sorted(ALGORITHMS["all_reduce"]) if why_not(c, coll, a) is None]
    assert "hierarchical" in names or not whole
    for a in names:
        sim = Simulation(c, "steps")
        proc, buf, _ = run_collective(sim, Collective("all_reduce", ranks, 7, np.dtype("int64")), x.copy(), a)
        sim.env.run(proc)
        np.testing.assert_array_equal(buf.rows, np.broadcast_to(x.sum(axis=0), (n, 7)), err_msg=a)
