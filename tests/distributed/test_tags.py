"""clock.tagged: a rank program's tags reach its compute spans, p2p transfers and collectives."""
import numpy as np

import simcomm
import simcomm.distributed as dist
from simcomm import clock


def _program(rank):
    x = np.ones(4)
    with clock.tagged(stage=rank, phase="forward"):
        clock.compute(flops=1e9, tags={"microbatch": 0})
        with clock.tagged(axis="tp"):
            assert clock.current_tags() == {"stage": rank, "phase": "forward", "axis": "tp"}
            dist.all_reduce(x)
        if rank == 0:
            dist.send(x, 1)
        elif rank == 1:
            dist.recv(x, 0)
    assert clock.current_tags() == {}
    clock.compute(flops=1e9)
    return x


def test_tags_reach_compute_p2p_and_collectives():
    acts = simcomm.spawn(_program, nprocs=2).timeline
    compute = [(a.rank, dict(a.tags)) for a in acts if a.kind == "compute"]
    assert (0, {"stage": 0, "phase": "forward", "microbatch": 0}) in compute
    assert (1, {"stage": 1, "phase": "forward", "microbatch": 0}) in compute
    assert sum(1 for _, t in compute if t == {}) == 2  # outside the block: no tags
    colls = [a for a in acts if a.kind == "collective"]
    assert len(colls) == 2
    for a in colls:  # the members agree on phase and axis, not on stage: only the common tags are kept
        assert a.tags["phase"] == "forward" and a.tags["axis"] == "tp" and "stage" not in a.tags
        assert a.tags["collective"] == "all_reduce"
    (p2p,) = [a for a in acts if a.kind == "p2p"]
    assert p2p.rank == 0 and p2p.peer == 1 and dict(p2p.tags) == {"stage": 0, "phase": "forward"}
    sends = [a for a in acts if a.kind == "send" and a.label == "send 0->1"]
    assert sends and all(a.tags["stage"] == 0 for a in sends)


def _queued(rank):
    clock.compute(seconds=1e-3, wait=False)  # queued: the program goes on at once
    queued_at = clock.time()
    x = np.ones(2)
    dist.all_reduce(x)  # starts only once every member's queued compute has run
    after_collective = clock.time()
    clock.compute(seconds=1e-3 * rank, wait=False)
    return queued_at, after_collective


def test_queued_compute_runs_before_the_next_collective():
    res = simcomm.spawn(_queued, nprocs=2)
    for queued_at, after in res.results:
        assert queued_at == 0.0 and after > 1e-3
    (coll,) = {a.start for a in res.timeline if a.kind == "collective"}
    assert coll >= 1e-3
    # a rank ends when its queued compute has run
    assert res.finish_times[1] >= res.results[1][1] + 1e-3 and res.finish_times[0] == res.results[0][1]
