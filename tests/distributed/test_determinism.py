"""Equal programs give equal runs: the same timeline (every Activity), the same elapsed time and results."""
import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist
from simcomm import clock


def mixed_program(rank, steps):
    """Collectives, subgroups, any-source receives, async work and sleeps, all interleaved."""
    n = dist.get_world_size()
    g = dist.new_group(list(range(0, n, 2)))
    x = np.arange(64, dtype=np.float32) + rank
    for step in range(steps):
        clock.sleep(1e-6 * ((rank * 7 + step) % 3))
        dist.all_reduce(x)
        if g is not dist.GroupMember.NON_GROUP_MEMBER:
            dist.broadcast(x, src=0, group=g)
        send = np.full(16, float(rank + step))
        recv = np.zeros(16)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, (rank + 1) % n),
                                        dist.P2POp(dist.irecv, recv, (rank - 1) % n)])
        for w in works:
            w.wait()
        x[:16] += recv
        if rank == 0:
            got = [dist.recv(np.zeros(4)) for _ in range(n - 1)]  # any source: order follows simulated time
        else:
            clock.sleep(1e-6 * ((n - rank) % 4))
            dist.send(np.full(4, float(rank)), 0)
            got = None
        gathered = [np.zeros(64, dtype=np.float32) for _ in range(n)]
        dist.all_gather(gathered, x)
        c = 64 // n
        out = np.zeros(c, dtype=np.float32)
        dist.reduce_scatter(out, [x[i * c:(i + 1) * c].copy() for i in range(n)])
        dist.barrier()
    return x.tolist(), got


@pytest.mark.parametrize("cluster, nprocs", [("hgx-h100", 8), ("hgx-h100", 16), ("cpu-host", 4)])
def test_same_program_same_timeline(cluster, nprocs):
    a = simcomm.spawn(mixed_program, args=(3,), nprocs=nprocs, cluster=cluster)
    b = simcomm.spawn(mixed_program, args=(3,), nprocs=nprocs, cluster=cluster)
    assert a.elapsed == b.elapsed
    assert a.finish_times == b.finish_times
    assert a.results == b.results
    ta, tb = a.timeline, b.timeline
    assert len(ta) > 0 and ta == tb
    assert a.stats() == b.stats()


def test_timeline_is_sorted_and_within_elapsed():
    res = simcomm.spawn(mixed_program, args=(2,), nprocs=8)
    tl = res.timeline
    keys = [(a.start, a.rank, a.kind) for a in tl]
    assert keys == sorted(keys)
    assert all(0 <= a.start <= a.end <= res.elapsed + 1e-15 for a in tl)
    assert {"send", "collective"} <= {a.kind for a in tl}


def test_any_source_order_is_reproducible():
    def fn(rank):
        if rank == 0:
            return [dist.recv(np.zeros(1)) for _ in range(7)]
        dist.send(np.zeros(1), 0)  # all post at t=0

    runs = [simcomm.spawn(fn, nprocs=8).results[0] for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert sorted(runs[0]) == list(range(1, 8))


def test_size_only_and_real_runs_have_equal_timing():
    def fn(rank, real):
        t = np.ones(1 << 16, dtype=np.float32) if real else simcomm.size_only(1 << 16)
        dist.all_reduce(t)
        dist.broadcast(t, src=3)
        return clock.time()

    a = simcomm.spawn(fn, args=(True,), nprocs=8)
    b = simcomm.spawn(fn, args=(False,), nprocs=8)
    assert a.results == b.results and a.elapsed == b.elapsed
    assert a.timeline == b.timeline
