"""Object collectives: broadcast_object_list, all_gather_object, gather_object."""
import warnings

import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


def spawn(fn, nprocs=4, **kw):
    return simcomm.spawn(fn, nprocs=nprocs, **kw)


def test_broadcast_object_list():
    payload = [{"lr": 0.1, "layers": [1, 2, 3]}, "text", Point(1, 2), None]

    def fn(rank):
        objs = list(payload) if rank == 1 else [None] * 4
        original = objs[2]
        dist.broadcast_object_list(objs, src=1)
        return objs, objs[2] is original

    res = spawn(fn).results
    for rank, (objs, same) in enumerate(res):
        assert objs == payload
        assert same == (rank == 1)  # the source keeps its own objects; the others get copies


def test_broadcast_object_list_default_source_is_rank_0():
    def fn(rank):
        objs = [rank * 10, f"from {rank}"]
        dist.broadcast_object_list(objs)
        return objs

    assert spawn(fn).results == [[0, "from 0"]] * 4


def test_broadcast_object_list_numpy_values():
    def fn(rank):
        objs = [np.arange(5) * 2] if rank == 0 else [None]
        dist.broadcast_object_list(objs, src=0)
        return objs[0]

    for a in spawn(fn).results:
        np.testing.assert_array_equal(a, np.arange(5) * 2)


def test_all_gather_object_with_different_sizes():
    def fn(rank):
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, {"rank": rank, "blob": "x" * (rank * 37)})
        return out

    expected = [{"rank": r, "blob": "x" * (r * 37)} for r in range(4)]
    assert spawn(fn).results == [expected] * 4


def test_gather_object():
    def fn(rank):
        out = [None] * 4 if rank == 2 else None
        dist.gather_object((rank, "y" * rank), out, dst=2)
        return out

    res = spawn(fn).results
    assert res[2] == [(r, "y" * r) for r in range(4)]
    assert res[0] is None and res[1] is None and res[3] is None


def test_gather_object_list_checks():
    def on_non_dst(rank):
        dist.gather_object(rank, [None] * 2, dst=0)

    with pytest.raises(ValueError, match="must NOT be specified on non-destination ranks"):
        spawn(on_non_dst, nprocs=2)

    def missing_on_dst(rank):
        dist.gather_object(rank, None, dst=0)

    with pytest.raises(ValueError, match="must be specified on destination rank"):
        spawn(missing_on_dst, nprocs=2)


def test_object_collectives_in_a_subgroup():
    def fn(rank):
        g = dist.new_group([1, 3])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gathered = [None, None]
            dist.all_gather_object(gathered, rank * 100, group=g)
            objs = [f"r{rank}"]
            dist.broadcast_object_list(objs, src=3, group=g)
        return gathered, objs, len(caught)

    res = spawn(fn).results
    assert res[1] == ([100, 300], ["r3"], 0) and res[3] == ([100, 300], ["r3"], 0)
    assert res[0] == ([None, None], ["r0"], 2) and res[2] == ([None, None], ["r2"], 2)


def test_object_collectives_cost_simulated_time():
    def fn(rank):
        out = [None] * 4
        dist.all_gather_object(out, "z" * 100_000)
        return out[0] == "z" * 100_000

    res = spawn(fn)
    assert all(res.results)
    assert res.elapsed > 0
    assert sum(a.nbytes for a in res.timeline if a.kind == "send") >= 3 * 4 * 100_000


def test_scatter_object_list_and_torch_213_single_tensor_names():
    def fn(rank):
        out = [None]
        objs = [{"rank": i, "tag": "x" * i} for i in range(4)] if rank == 1 else None
        dist.scatter_object_list(out, objs, src=1)
        gathered = np.zeros(8, dtype=np.float32)
        dist.all_gather_single(gathered, np.full(2, rank, dtype=np.float32))
        shard = np.zeros(2, dtype=np.float32)
        dist.reduce_scatter_single(shard, np.arange(8, dtype=np.float32))
        dist.monitored_barrier()
        return out[0], gathered.tolist(), shard.tolist()

    results = spawn(fn, nprocs=4).results
    for rank, (obj, gathered, shard) in enumerate(results):
        assert obj == {"rank": rank, "tag": "x" * rank}
        assert gathered == [0, 0, 1, 1, 2, 2, 3, 3]
        assert shard == [8 * rank, 8 * rank + 4]
