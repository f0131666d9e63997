"""Reductions computed straight from the ranks' own arrays (fold.py for the rings, tree_schedule.tree_fold for the
double tree) give the very bits of the plans' step-by-step numerics on stacked rows: every dtype, op, rank count,
size and node layout, NaNs and signed zeros included."""
import os
from contextlib import contextmanager
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm import arrays
from simcomm.algorithms import Buffers, Collective, ReduceOp
from simcomm.algorithms.plan import FLAT, Placement
from simcomm.algorithms.gloo import gloo_all_reduce
from simcomm.algorithms.ring import ring_all_reduce
from simcomm.algorithms.tree import tree_all_reduce

DTYPES = ["float32", "float16", "float64", "int32", "int64", "uint8", "int8", "bool", "complex64"]
OPS = {"SUM", "PRODUCT", "MAX", "MIN", "BAND", "BOR", "BXOR", "AVG"}


def _allowed(op: str, dtype: np.dtype) -> bool:
    if op in ("BAND", "BOR", "BXOR"):
        return dtype.kind in "iub"
    if dtype.kind == "c":
        return op in ("SUM", "AVG")
    return not (op == "AVG" and dtype.kind in "iub")


def _data(rng, n: int, count: int, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "b":
        return rng.integers(0, 2, (n, count)).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(0, 100, (n, count)).astype(dtype)
    x = rng.standard_normal((n, count * (2 if dtype.kind == "c" else 1)))
    x[rng.random(x.shape) < 0.02] = np.nan
    x[rng.random(x.shape) < 0.02] = -0.0
    return x.astype(dtype if dtype.kind != "c" else np.float32).view(dtype)


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _run(plan, coll: Collective, buf: Buffers) -> np.ndarray:
    for _ in plan(coll, buf):
        pass
    return np.asarray(buf.rows)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 9), count=st.integers(0, 3000), dtype=st.sampled_from(DTYPES),
       op=st.sampled_from(sorted(OPS)), seed=st.integers(0, 2**31), plan=st.sampled_from(["gloo", "ring", "tree"]),
       nodes=st.sampled_from([1, 2, 3]))
def test_folding_the_ranks_arrays_equals_the_step_by_step_numerics(n, count, dtype, op, seed, plan, nodes):
    """nodes > 1: the ranks split into that many equal nodes, so NCCL's ring runs one channel per local rank."""
    _check_fold(n, count, dtype, op, seed, plan, nodes)


@contextmanager
def _threads(k: int):
    """Every fold cut into k element ranges computed in k threads, however small (arrays.in_parts)."""
    with mock.patch.object(arrays, "PARALLEL_BYTES", 0), mock.patch.dict(os.environ, {"SIMCOMM_THREADS": str(k)}):
        yield


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 9), count=st.integers(0, 3000), dtype=st.sampled_from(DTYPES),
       op=st.sampled_from(sorted(OPS)), seed=st.integers(0, 2**31), plan=st.sampled_from(["gloo", "ring"]),
       nodes=st.sampled_from([1, 2, 3]), threads=st.integers(2, 5))
def test_folding_in_threads_gives_the_same_bits(n, count, dtype, op, seed, plan, nodes, threads):
    """How the elements are cut between threads never changes a bit (each element sees the same calls)."""
    with _threads(threads):
        _check_fold(n, count, dtype, op, seed, plan, nodes)


def _check_fold(n, count, dtype, op, seed, plan, nodes):
    dtype = np.dtype(dtype)
    if not _allowed(op, dtype) or (plan != "gloo" and dtype.kind == "c"):
        return
    rows = _data(np.random.default_rng(seed), n, count, dtype)
    placement = Placement(None, n // nodes, n // nodes) if nodes > 1 and n % nodes == 0 else FLAT
    coll = Collective("all_reduce", np.arange(n), count, dtype, getattr(ReduceOp, op), placement=placement)
    fn = {"gloo": gloo_all_reduce, "ring": ring_all_reduce, "tree": tree_all_reduce}[plan]
    stacked = _run(fn, coll, Buffers(rows.copy(), coll.op))
    sources = [row.copy() for row in rows]
    folded = _run(fn, coll, Buffers(None, coll.op, sources=sources))
    assert _bits(folded) == _bits(stacked)
    assert all(_bits(s) == _bits(r) for s, r in zip(sources, rows))  # the ranks' arrays are only read


@settings(max_examples=60, deadline=None)
@given(nodes=st.sampled_from([1, 2, 3, 5]), per_node=st.sampled_from([2, 4, 8]), count=st.integers(0, 5000),
       dtype=st.sampled_from([d for d in DTYPES if d != "complex64"]), op=st.sampled_from(sorted(OPS)),
       seed=st.integers(0, 2**31))
def test_nvls_and_nvls_tree_from_the_ranks_arrays(nodes, per_node, count, dtype, op, seed):
    """NVLink SHARP on one node, NVLS-Tree across nodes: the switch's rank-order sum and the node trees."""
    from simcomm.algorithms.nvls import nvls_all_reduce
    from simcomm.algorithms.nvls_tree import nvls_tree_all_reduce
    from simcomm.hardware import build_cluster
    dtype = np.dtype(dtype)
    if not _allowed(op, dtype):
        return
    cluster = build_cluster("hgx-h100", nodes=nodes)
    ranks = np.array([k * 8 + local for k in range(nodes) for local in range(per_node)])
    coll = Collective("all_reduce", ranks, count, dtype, getattr(ReduceOp, op)).placed(cluster)
    rows = _data(np.random.default_rng(seed), len(ranks), count, dtype)
    fn = nvls_all_reduce if nodes == 1 else nvls_tree_all_reduce
    stacked = _run(fn, coll, Buffers(rows.copy(), coll.op))
    sources = [row.copy() for row in rows]
    assert _bits(_run(fn, coll, Buffers(None, coll.op, sources=sources))) == _bits(stacked)
    assert all(_bits(s) == _bits(r) for s, r in zip(sources, rows))


def _reference_moves(ring, per, count):
    """fold's element ranges found afresh at every position: each sweep's chunks by mask, split into runs."""
    ranks, chunks, starts = ring
    for first_sweep in (True, False):
        for p, rank in enumerate(np.asarray(ranks).tolist()):
            sets = ((chunks[starts == p], True), (chunks[starts < p], False)) if first_sweep else \
                ((chunks[starts > p], False),)
            for ids, first in sets:
                ids = np.sort(ids)
                for run in np.split(ids, np.flatnonzero(np.diff(ids) != 1) + 1) if len(ids) else []:
                    lo, hi = int(run[0]) * per, min((int(run[-1]) + 1) * per, count)
                    if lo < hi:
                        yield rank, lo, hi, first


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 12), spread=st.integers(1, 4), per=st.integers(1, 5), seed=st.integers(0, 2**31))
def test_fold_order_is_found_incrementally_as_it_would_be_afresh(n, spread, per, seed):
    """Any ring: chunk ids anywhere (runs break between ids that are not consecutive), starts in any order,
    repeated or out of range."""
    from simcomm.algorithms.fold import _moves
    rng = np.random.default_rng(seed)
    ring = (rng.permutation(n), rng.choice(spread * n, size=n, replace=False), rng.integers(-1, n + 1, size=n))
    count = int(rng.integers(0, spread * n * per + 2))
    assert list(_moves(ring, per, count)) == list(_reference_moves(ring, per, count))
