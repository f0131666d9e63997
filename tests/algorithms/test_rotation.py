"""gloo's uneven ring as rotating steps (algorithms/rotation.py): the closed form gives the step-by-step path's
simulated times, timeline, memory rows and values bit for bit, and is taken where it applies."""
from __future__ import annotations

import numpy as np
import pytest

import simcomm.distributed as dist
from simcomm.algorithms import rotation
from simcomm.algorithms.gloo import gloo_all_reduce, gloo_combine, gloo_reduce, gloo_reference, segmentation
from simcomm.algorithms.plan import Buffers, Collective
from simcomm.algorithms.reduce_ops import ReduceOp
from simcomm.distributed.spawn import spawn
from simcomm.distributed.tensors import size_only
from simcomm.hardware import build_cluster


def _program(rank, kind, count, dtype, op_name):
    n = dist.get_world_size()
    op = getattr(dist.ReduceOp, op_name)
    out = []
    for i in range(2):  # twice: the second call meets what the first left behind (the engine's caches)
        x = ((np.arange(count) * 0.37 + rank * 1.3 + i) % 7).astype(dtype)
        if kind == "all_reduce":
            dist.all_reduce(x, op=op)
        elif kind == "reduce":
            dist.reduce(x, dst=n - 1, op=op)
        elif kind == "reduce_scatter_tensor":
            y = ((np.arange(n * count) * 0.11 + rank) % 5).astype(dtype)
            x = np.empty(count, dtype=dtype)
            dist.reduce_scatter_tensor(x, y, op=op)
        elif kind == "reduce_scatter":
            x = np.empty(count, dtype=dtype)
            dist.reduce_scatter(x, [((np.arange(count) + j + rank) % 3).astype(dtype) for j in range(n)], op=op)
        else:  # size-only
            dist.all_reduce(size_only(count, dtype=dtype), op=op)
            x = np.zeros(0, dtype=dtype)
        out.append(x.tobytes())
    return b"".join(out)


def _run(monkeypatch, stepwise: bool, n: int, *args, cluster="cpu-host"):
    """(what must agree, closed-form stages) of one run, the closed form forbidden if stepwise."""
    with monkeypatch.context() as m:
        if stepwise:
            m.setattr(rotation._Stages, "of", classmethod(lambda cls, ex, st: None))
        r = spawn(_program, args=args, nprocs=n, cluster=cluster, detail="steps")
    timeline = [(a.rank, a.kind, a.start, a.end, a.label) for a in r.timeline]
    rows = [(s.kind, s.label, s.steps, s.ranks, s.start, s.end, s.amount) for s in r.simulation.recorder.step_rows()]
    memory = r.simulation.memory.free_at.tobytes()
    return (r.elapsed, r.finish_times, r.results, timeline, rows, memory), r.stats()["closed_form"]


CASES = [(n, count) for n in (3, 5, 16, 67) for count in (1, 3, n, 2 * n - 1, 10 * n + 3)]


@pytest.mark.parametrize("n,count", CASES)
def test_all_reduce_unchanged(monkeypatch, n, count):
    closed, stages = _run(monkeypatch, False, n, "all_reduce", count, "float32", "SUM")
    stepwise, before = _run(monkeypatch, True, n, "all_reduce", count, "float32", "SUM")
    assert closed == stepwise
    per = segmentation(count, n, 4)[2]
    if count != n * per:  # uneven chunks: every stage of both calls (2 phases of n-1) in closed form now
        assert stages == 2 * 2 * (n - 1) and before < stages


@pytest.mark.parametrize("kind", ["reduce", "reduce_scatter_tensor", "reduce_scatter", "size_only"])
@pytest.mark.parametrize("dtype,op", [("float64", "SUM"), ("int8", "MAX"), ("float32", "PRODUCT")])
def test_other_collectives_unchanged(monkeypatch, kind, dtype, op):
    for n, count in ((7, 3), (33, 41)):  # uneven chunks in every kind
        closed, stages = _run(monkeypatch, False, n, kind, count, dtype, op)
        stepwise, before = _run(monkeypatch, True, n, kind, count, dtype, op)
        assert closed == stepwise
        assert stages > before  # the closed form was taken


def test_values_are_gloo_order():
    """A float32 sum whose order shows: the closed form moves the data as gloo does (ranks c-1, c-2, ..., c)."""
    n, count = 40, 5
    xs = np.random.default_rng(3).standard_normal((n, count)).astype(np.float32) * 1e3

    def program(rank):
        x = xs[rank].copy()
        dist.all_reduce(x)
        return x

    expect = gloo_reference(xs, dist.ReduceOp.SUM)[0]
    r = spawn(program, nprocs=n, cluster="cpu-host", detail="steps")
    assert r.stats()["closed_form"] >= 2 * (n - 1)
    assert all(v.tobytes() == expect.tobytes() for v in r.results)


@pytest.mark.parametrize("nodes,per_node,count", [(3, 4, 1), (3, 4, 5), (4, 16, 1), (4, 16, 3), (4, 16, 70),
                                                  (2, 40, 1), (5, 7, 9)])
def test_several_hosts_unchanged(monkeypatch, nodes, per_node, count):
    """Several hosts: the ring's few flows across hosts take routes of their own (NICs), timed with the stage's
    other sizes; the same as step by step."""
    cluster = build_cluster("cpu-host", nodes=nodes, ranks_per_node=per_node)
    n = nodes * per_node
    closed, stages = _run(monkeypatch, False, n, "all_reduce", count, "float32", "SUM", cluster=cluster)
    stepwise, before = _run(monkeypatch, True, n, "all_reduce", count, "float32", "SUM", cluster=cluster)
    assert closed == stepwise and stages == 2 * 2 * (n - 1)


def test_where_it_does_not_apply(monkeypatch):
    """A host whose ranks' copies share one host link: flows that share a link go step by step (the same)."""
    cluster = build_cluster("cpu-host", ranks_per_node=9, params={"host_bandwidth": 20e9})
    closed, stages = _run(monkeypatch, False, 9, "all_reduce", 1, "float32", "SUM", cluster=cluster)
    stepwise, before = _run(monkeypatch, True, 9, "all_reduce", 1, "float32", "SUM", cluster=cluster)
    assert closed == stepwise and stages == before


def test_nvswitch_node_unchanged(monkeypatch):
    """gloo's numerics on one NVSwitch node: each GPU's flows on ports of its own, the closed form applies."""
    results = []
    for stepwise in (False, True):
        with monkeypatch.context() as m:
            if stepwise:
                m.setattr(rotation._Stages, "of", classmethod(lambda cls, ex, st: None))
            r = spawn(_program, args=("all_reduce", 5, "float32", "SUM"), nprocs=8, cluster="hgx-h100",
                      numerics="gloo", detail="steps")
        results.append((r.elapsed, r.results, [(a.rank, a.start, a.end) for a in r.timeline], r.stats()["closed_form"]))
    assert results[0][:3] == results[1][:3] and results[0][3] > results[1][3]


def _old_ring(rows: np.ndarray, op, gather: bool, root: int = 0) -> np.ndarray:
    """The data of gloo's ring as the per-stage plan moved it before (every chunk padded, empty ones too)."""
    n, count = rows.shape
    per = segmentation(count, n, rows.dtype.itemsize, "all_reduce" if gather else "reduce")[2]
    work = np.zeros((n, n * per), rows.dtype)
    work[:, :count] = rows
    work = work.reshape(n, n, per)
    r = np.arange(n)
    for s in range(n - 1):
        c = (r + 1 + s) % n
        work[r - 1, c] = gloo_combine(op, work[r - 1, c], work[r, c])
    if gather:
        for s in range(n - 1):
            c = (r + s) % n
            work[r - 1, c] = work[r, c]
    else:
        others = r[r != root]
        work[root, others] = work[others, others]
    return work.reshape(n, -1)[:, :count]


@pytest.mark.parametrize("n,count", [(2, 1), (5, 1), (6, 3), (9, 13), (16, 31), (7, 40)])
@pytest.mark.parametrize("op", ["SUM", "MAX", "PRODUCT"])
def test_data_of_chunks_holding_data_only(n, count, op):
    """Only the chunks holding data move now: the same bits as moving every (padded) chunk, the partial sums gloo
    leaves on reduce's other ranks included."""
    rows = np.random.default_rng(n * count).standard_normal((n, count)).astype(np.float32)
    op = getattr(ReduceOp, op)
    for plan, gather in ((gloo_all_reduce, True), (gloo_reduce, False)):
        root = count % n
        coll = Collective("all_reduce" if gather else "reduce", np.arange(n), count, rows.dtype, op, root)
        buf = Buffers(rows.copy(), op)
        list(plan(coll, buf))
        assert buf.rows.tobytes() == _old_ring(rows, op, gather, root).tobytes()


@pytest.mark.parametrize("most", [None, 2, 0])
@pytest.mark.parametrize("memory", [None, 1e9])
def test_runs_and_ranks_agree(monkeypatch, most, memory):
    """Clocks kept as runs (ring_runs.py), switching to rank by rank part way (at most `most` runs) or from the
    start (0), and memory slow enough that every stage waits for its reductions: all the step-by-step path's."""
    n = 67
    cluster = build_cluster("cpu-host", ranks_per_node=n,
                            overrides=None if memory is None else {"memory_bandwidth": memory})
    if most is not None:
        monkeypatch.setattr(rotation, "_MOST_RUNS", most)
        monkeypatch.setattr(rotation, "_RUNS_PER_RANK", 10 ** 9)
    for count in (1, 3, n + 2):
        closed, stages = _run(monkeypatch, False, n, "all_reduce", count, "float32", "SUM", cluster=cluster)
        stepwise, before = _run(monkeypatch, True, n, "all_reduce", count, "float32", "SUM", cluster=cluster)
        assert closed == stepwise and stages == 2 * 2 * (n - 1)


def test_switching_to_ranks_part_way(monkeypatch):
    """Runs that grow too many part way through a phase hand over every rank's clock and memory as they are."""
    from simcomm.algorithms.ring_runs import RingRuns

    class Growing(RingRuns):
        taken = 0

        def step(self, *args):
            super().step(*args)
            self.taken += 1

        def __len__(self):
            return 10 ** 9 if self.taken >= 5 else super().__len__()

    n = 23
    monkeypatch.setattr(rotation, "RingRuns", Growing)
    for count in (1, 3, 30):
        closed, stages = _run(monkeypatch, False, n, "all_reduce", count, "float32", "SUM")
        stepwise, _ = _run(monkeypatch, True, n, "all_reduce", count, "float32", "SUM")
        assert closed == stepwise and stages == 2 * 2 * (n - 1)


def test_last_stage_is_the_last_reception():
    from simcomm.algorithms.ring_runs import last_stage
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 30))
        held = np.flatnonzero(rng.random(n) < rng.random())
        j = int(rng.integers(0, n))
        expect = [max([s for s in range(j) if (p + 1 + s) % n in set(held.tolist())], default=-1) for p in range(n)]
        assert list(last_stage(held, n, j)) == expect
