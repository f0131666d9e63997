"""Process groups: new_group, non-members, new_subgroups, group-relative peers and rank translation."""
import warnings

import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist


def spawn(fn, nprocs=4, **kw):
    return simcomm.spawn(fn, nprocs=nprocs, **kw)


def test_world_queries():
    def fn(rank):
        w = dist.group.WORLD
        return (dist.get_rank(), dist.get_world_size(), dist.get_rank(w), dist.get_world_size(w),
                dist.get_process_group_ranks(w), dist.is_initialized(), dist.get_backend())

    for r, out in enumerate(spawn(fn).results):
        assert out == (r, 4, r, 4, [0, 1, 2, 3], True, "nccl")
    assert spawn(fn, cluster="cpu-host").results[0][-1] == "gloo"


def test_get_backend_is_the_one_asked_for():
    def fn(rank):
        dist.init_process_group("gloo" if rank % 2 else "NCCL", rank=rank, world_size=4)
        return dist.get_backend()

    assert spawn(fn).results == ["nccl", "gloo", "nccl", "gloo"]


def test_non_member_gets_marker_and_minus_one():
    def fn(rank):
        g = dist.new_group([1, 3])
        member = g is not dist.GroupMember.NON_GROUP_MEMBER
        return member, dist.get_rank(g), dist.get_world_size(g)

    assert spawn(fn).results == [(False, -1, -1), (True, 0, 2), (False, -1, -1), (True, 1, 2)]


@pytest.mark.parametrize("call", [
    lambda g: dist.all_reduce(np.ones(2), group=g),
    lambda g: dist.broadcast(np.ones(2), src=1, group=g),
    lambda g: dist.reduce(np.ones(2), dst=1, group=g),
    lambda g: dist.all_gather([np.zeros(2), np.zeros(2)], np.ones(2), group=g),
    lambda g: dist.gather(np.ones(2), [np.zeros(2), np.zeros(2)] if dist.get_rank() == 1 else None, dst=1, group=g),
    lambda g: dist.scatter(np.ones(2), [np.zeros(2), np.zeros(2)] if dist.get_rank() == 1 else None, src=1,
                           group=g),
    lambda g: dist.reduce_scatter(np.ones(2), [np.zeros(2), np.zeros(2)], group=g),
    lambda g: dist.barrier(group=g),
    lambda g: dist.all_reduce(np.ones(2), group=g, async_op=True),
], ids=["all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter", "reduce_scatter", "barrier",
        "all_reduce_async"])
def test_collectives_on_non_members_warn_and_return_none(call):
    def fn(rank):
        g = dist.new_group([1, 3])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ret = call(g)
            if isinstance(ret, dist.Work):
                ret.wait()
                ret = None
        return ret, [str(w.message) for w in caught]

    res = spawn(fn).results
    for rank in (0, 2):
        ret, msgs = res[rank]
        assert ret is None
        assert len(msgs) == 1 and f"global rank {rank} which does not belong to the given group" in msgs[0]
    for rank in (1, 3):
        assert res[rank] == (None, [])


def test_non_member_data_is_untouched_and_members_reduce():
    def fn(rank):
        g = dist.new_group([1, 3])
        t = np.full(3, float(rank))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dist.all_reduce(t, group=g)
        return t.tolist()

    assert spawn(fn).results == [[0.0] * 3, [4.0] * 3, [2.0] * 3, [4.0] * 3]


def test_subgroup_collectives_run_concurrently_with_world():
    """Two disjoint groups' collectives overlap in time: each takes as long as it would alone."""
    def alone(rank):
        g = dist.new_group([0, 1])
        if rank in (0, 1):
            dist.all_reduce(simcomm.size_only(1 << 20), group=g)

    def both(rank):
        g1, g2 = dist.new_group([0, 1]), dist.new_group([2, 3])
        dist.all_reduce(simcomm.size_only(1 << 20), group=g1 if rank < 2 else g2)

    assert spawn(both).elapsed == pytest.approx(spawn(alone).elapsed, rel=1e-9)


def test_group_rank_translation():
    def fn(rank):
        g = dist.new_group([3, 1, 2])  # torch orders group ranks by global rank
        if g is dist.GroupMember.NON_GROUP_MEMBER:
            return None
        return ([dist.get_group_rank(g, r) for r in (1, 2, 3)], [dist.get_global_rank(g, i) for i in range(3)],
                dist.get_process_group_ranks(g), dist.get_rank(g))

    res = spawn(fn).results
    assert res[0] is None
    for rank in (1, 2, 3):
        assert res[rank] == ([0, 1, 2], [1, 2, 3], [1, 2, 3], rank - 1)


def test_group_rank_translation_errors():
    def fn(rank):
        g = dist.new_group([0, 1])
        errors = []
        for call in (lambda: dist.get_group_rank(g, 3), lambda: dist.get_global_rank(g, 2)):
            with pytest.raises(ValueError) as info:
                call()
            errors.append(str(info.value))
        if rank >= 2:  # the marker answers the ranks of the group this rank was left out of, as in torch
            assert dist.get_process_group_ranks(g) == [0, 1]
        return errors

    errors = spawn(fn).results[0]
    assert "Global rank 3 is not part of group" in errors[0]
    assert "Group rank 2 is not part of group" in errors[1]


def test_world_group_translation_is_identity():
    def fn(rank):
        w = dist.group.WORLD
        return dist.get_group_rank(w, rank), dist.get_global_rank(w, rank)

    assert spawn(fn).results == [(r, r) for r in range(4)]


def test_group_src_and_group_dst():
    def fn(rank):
        g = dist.new_group([1, 2, 3])
        if g is dist.GroupMember.NON_GROUP_MEMBER:
            return None
        b = np.array([float(rank)])
        dist.broadcast(b, group=g, group_src=2)  # global rank 3
        lst = [np.zeros(1) for _ in range(3)] if rank == 2 else None
        dist.gather(np.array([float(rank)]), lst, group=g, group_dst=1)  # global rank 2
        s = np.zeros(1)
        dist.scatter(s, [np.array([10.0 * i]) for i in range(3)] if rank == 1 else None, group=g, group_src=0)
        r = np.array([float(rank)])
        dist.reduce(r, group=g, group_dst=2)  # global rank 3
        return b[0], lst and [x[0] for x in lst], s[0], r[0]

    res = spawn(fn).results
    assert res[0] is None
    assert [x[0] for x in res[1:]] == [3.0, 3.0, 3.0]
    assert res[2][1] == [1.0, 2.0, 3.0] and res[1][1] is None and res[3][1] is None
    assert [x[2] for x in res[1:]] == [0.0, 10.0, 20.0]
    assert res[3][3] == 6.0


def test_src_is_global_even_with_a_group():
    def fn(rank):
        g = dist.new_group([2, 3])
        if g is dist.GroupMember.NON_GROUP_MEMBER:
            return None
        t = np.array([float(rank)])
        dist.broadcast(t, src=3, group=g)
        return t[0]

    assert spawn(fn).results == [None, None, 3.0, 3.0]


def test_peer_argument_errors():
    def fn(rank):
        g = dist.new_group([0, 1])
        if rank >= 2:
            return []
        out = []
        for call in (lambda: dist.broadcast(np.zeros(1), src=0, group=g, group_src=0),
                     lambda: dist.broadcast(np.zeros(1), group=g),
                     lambda: dist.broadcast(np.zeros(1), src=3, group=g),
                     lambda: dist.broadcast(np.zeros(1), group=g, group_src=2)):
            with pytest.raises(ValueError) as info:
                call()
            out.append(str(info.value))
        return out

    msgs = spawn(fn).results[0]
    assert "Can not specify both src and group_src" in msgs[0]
    assert "Must specify either src or group_src" in msgs[1]
    assert "src 3 is not a member" in msgs[2]
    assert "group_src 2 is out of range" in msgs[3]


def test_new_group_argument_errors():
    def fn(rank):
        with pytest.raises(ValueError, match="Rank 7 is out of range. Valid ranks are 0 to 3"):
            dist.new_group([0, 7])
        with pytest.raises(ValueError, match="duplicate"):
            dist.new_group([1, 1])
        return dist.get_world_size(dist.new_group([0, 1, 2, 3]))  # bad calls did not count

    assert spawn(fn).results == [4] * 4


def test_new_group_calls_must_agree():
    def fn(rank):
        dist.new_group([0, 1] if rank == 0 else [0, 2])

    with pytest.raises(simcomm.MismatchError, match="new_group call #1 disagrees"):
        spawn(fn, nprocs=3)


def test_new_subgroups():
    def fn(rank):
        mine, subgroups = dist.new_subgroups(2)
        t = np.array([float(rank)])
        dist.all_reduce(t, group=mine)
        members = [None if g is dist.GroupMember.NON_GROUP_MEMBER else dist.get_process_group_ranks(g)
                   for g in subgroups]
        return t[0], dist.get_rank(mine), dist.get_world_size(mine), members

    res = spawn(fn).results
    marker = None
    assert res[0] == (1.0, 0, 2, [[0, 1], marker])
    assert res[1] == (1.0, 1, 2, [[0, 1], marker])
    assert res[2] == (5.0, 0, 2, [marker, [2, 3]])
    assert res[3] == (5.0, 1, 2, [marker, [2, 3]])


def test_new_subgroups_defaults_to_one_node():
    def fn(rank):
        mine, subgroups = dist.new_subgroups()
        return dist.get_process_group_ranks(mine), len(subgroups)

    res = spawn(fn, nprocs=16).results
    assert res[3] == (list(range(8)), 2) and res[12] == (list(range(8, 16)), 2)


def test_new_subgroups_must_divide_the_world():
    def fn(rank):
        dist.new_subgroups(3)

    with pytest.raises(ValueError, match=r"world size \(4\) must be divisible by 'group_size=3'"):
        spawn(fn)


def test_init_process_group_checks_its_arguments():
    def fn(rank):
        dist.init_process_group("nccl", world_size=4, rank=rank)
        with pytest.raises(ValueError, match="world_size=8"):
            dist.init_process_group("nccl", world_size=8)
        with pytest.raises(ValueError, match=rf"init_process_group\(rank={(rank + 1) % 4}\) called by rank {rank}"):
            dist.init_process_group("nccl", rank=(rank + 1) % 4)
        return True

    assert all(spawn(fn).results)


def test_a_3d_device_mesh_and_its_sub_meshes():
    """init_device_mesh((2, 2, 2)): one group per slice along each dimension; mesh["dp", "tp"] keeps this rank's
    cp coordinate and the parent's groups, in the order named."""
    def fn(rank):
        mesh = dist.init_device_mesh("cuda", (2, 2, 2), mesh_dim_names=("dp", "cp", "tp"))
        sub = mesh["tp", "dp"]
        x = np.full(1, float(rank))
        dist.all_reduce(x, group=mesh.get_group("cp"))
        return (mesh.get_coordinate(), [mesh.get_group(d).ranks for d in range(3)], sub.mesh.tolist(),
                sub.get_coordinate(), sub.get_group("dp") is mesh.get_group("dp"), sub.size(), x[0])

    out = spawn(fn, nprocs=8).results
    assert out[5][0] == (1, 0, 1) and out[5][1] == [(1, 5), (5, 7), (4, 5)]
    assert out[5][2] == [[0, 4], [1, 5]] and out[5][3] == (1, 1) and out[5][4] and out[5][5] == 4
    assert [o[6] for o in out] == [2.0, 4.0, 2.0, 4.0, 10.0, 12.0, 10.0, 12.0]


def test_torchs_small_print_world_work_aliases_and_non_member_ranks():
    """Issue 25: group.WORLD is a ProcessGroup, an async call's handle a Work; get_process_group_ranks of the
    marker new_group hands a rank outside the group answers the last such group's ranks (torch files every
    non-member group's ranks under NON_GROUP_MEMBER, each overwriting the last); reduce_op warns as torch's;
    GroupName and RankType exist; spawn takes torch.multiprocessing.spawn's daemon and start_method."""
    import warnings

    def fn(rank):
        w = dist.all_reduce(np.ones(2), async_op=True)
        first, second = dist.new_group([0, 1]), dist.new_group([1, 2])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            op = dist.reduce_op.MAX
        marker = second if rank == 0 else first if rank == 2 else None
        return (isinstance(dist.group.WORLD, dist.ProcessGroup), isinstance(w, dist.Work), op == dist.ReduceOp.MAX,
                [c.category for c in caught], dist.get_process_group_ranks(marker) if marker is not None else None)

    res = simcomm.spawn(fn, nprocs=3, cluster="cpu-host", daemon=True, start_method="fork").results
    assert [r[:4] for r in res] == [(True, True, True, [FutureWarning])] * 3
    assert res[0][4] == [1, 2] and res[2][4] == [0, 1]
    assert dist.GroupName("tp") == "tp" and dist.RankType is int
    with pytest.raises(simcomm.SimcommError, match="start_method='thread': expected one of spawn, fork"):
        simcomm.spawn(fn, nprocs=2, start_method="thread")
