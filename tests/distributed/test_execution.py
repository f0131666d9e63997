"""Ranks as greenlets or as threads (distributed/execution.py): the same runs, the same errors, either way."""
import sys

import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist
from simcomm.distributed.execution import default_execution

from .helpers import run


def mixed(rank):
    """p2p, collectives on the world and on a subgroup, sleeps and compute: every way a rank blocks."""
    x = np.arange(6, dtype=np.float32) * (rank + 1)
    dist.all_reduce(x)
    evens = dist.new_group([0, 2, 4, 6])
    if rank % 2 == 0:
        y = np.full(3, rank, dtype=np.int64)
        dist.broadcast(y, src=4, group=evens)
        x[:3] += y
    simcomm.clock.sleep(1e-6 * rank)
    simcomm.clock.compute(flops=1e9 * (rank + 1))
    buf = np.zeros(4, dtype=np.float64)
    if rank % 2 == 0:
        dist.send(np.full(4, rank, dtype=np.float64), dst=rank + 1)
    else:
        dist.recv(buf, src=rank - 1)
    dist.barrier()
    return x.tolist(), buf.tolist(), simcomm.clock.time()


def test_greenlets_and_threads_give_the_same_run():
    a = run(mixed, nprocs=8, execution="greenlet")
    b = run(mixed, nprocs=8, execution="thread")
    assert a.results == b.results and a.elapsed == b.elapsed and a.finish_times == b.finish_times
    assert [(x.kind, x.rank, x.start, x.end, x.label) for x in a.timeline] == \
        [(x.kind, x.rank, x.start, x.end, x.label) for x in b.timeline]
    assert a.results[1][1] == [0.0] * 4 and a.results[3][1] == [2.0] * 4  # what ranks 0 and 2 sent


@pytest.mark.parametrize("execution", ["greenlet", "thread"])
def test_an_error_unwinds_every_rank_and_their_cleanup_runs(execution):
    cleaned = []

    def fn(rank):
        try:
            if rank == 3:
                raise ValueError("boom")
            dist.barrier()
        finally:
            cleaned.append(rank)
            if rank != 3:
                dist.barrier()  # cleanup that would wait for rank 3: raises at once after the abort

    with pytest.raises(simcomm.RankFailed, match="rank 3"):
        run(fn, nprocs=6, execution=execution, limit=10)
    assert sorted(cleaned) == [0, 1, 2, 3]  # 4 and 5 never got a turn: a run stops at its first error


def test_thousands_of_size_only_ranks_as_greenlets():
    def fn(rank):
        dist.all_reduce(simcomm.size_only(1 << 20, dtype="float32"))
        return simcomm.clock.time()

    r = run(fn, nprocs=2048, execution="greenlet", detail="steps")
    assert len(set(r.results)) == 1 and r.results[0] > 0


def test_the_default_and_the_environment_choose(monkeypatch):
    monkeypatch.delenv("SIMCOMM_EXECUTION", raising=False)
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch", object()))
    assert default_execution() == "thread"  # torch keeps grad mode and dispatch modes per thread
    monkeypatch.delitem(sys.modules, "torch")
    assert default_execution() == "greenlet"
    monkeypatch.setenv("SIMCOMM_EXECUTION", "thread")
    assert default_execution() == "thread"
    monkeypatch.setenv("SIMCOMM_EXECUTION", "fibers")
    with pytest.raises(simcomm.SimcommError, match="execution must be one of greenlet, thread, got 'fibers'"):
        run(lambda rank: None, nprocs=2)
