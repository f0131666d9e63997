"""simcomm.distributed against the installed torch (2.13): every public torch.distributed name is served or listed
in NOT_SIMULATED with a reason, and served functions take torch's parameters (names, order, kinds, defaults), so
drift in either is caught (issue 11, item 4)."""
import inspect
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as tdist

import simcomm.distributed as dist

from .helpers import run


def _public_torch_names() -> set[str]:
    with warnings.catch_warnings():  # touching torch's deprecated reduce_op warns
        warnings.simplefilter("ignore", FutureWarning)
        return {n for n in dir(tdist) if not n.startswith("_") and not inspect.ismodule(getattr(tdist, n))}


def _served(name: str) -> bool:
    return hasattr(dist, name) and not inspect.ismodule(getattr(dist, name))  # (simcomm's submodules don't count)


def test_torch_is_the_pinned_version():
    assert torch.__version__.split("+")[0] == "2.13.0"


def test_every_torch_name_is_served_or_explained():
    torch_names = _public_torch_names()
    served = {n for n in torch_names if _served(n)}
    unexplained = sorted(torch_names - served - set(dist.NOT_SIMULATED))
    assert not unexplained, f"torch.distributed names neither served nor in NOT_SIMULATED: {unexplained}"
    stale = sorted(n for n in dist.NOT_SIMULATED if n not in torch_names or _served(n))
    assert not stale, f"NOT_SIMULATED lists names torch lacks or simcomm serves: {stale}"
    assert len(served) >= 70


def _params(fn):
    out = []
    for p in inspect.signature(fn).parameters.values():
        if p.name.startswith("_") or p.name == "self":
            continue
        default = p.default
        if default is not inspect.Parameter.empty and not (default is None or isinstance(default, (bool, int, str))):
            default = "<object>"  # ReduceOp.SUM, a timedelta: compared by presence only
        out.append((p.name, p.kind, default))
    return out


def _functions():
    for name in sorted(_public_torch_names()):
        theirs = getattr(tdist, name)
        if not _served(name) or inspect.isclass(theirs) or not callable(theirs):
            continue
        try:
            inspect.signature(theirs)
        except (TypeError, ValueError):  # a C++ builtin without a Python signature
            continue
        yield name


@pytest.mark.parametrize("name", list(_functions()))
def test_served_functions_take_torchs_parameters(name):
    assert _params(getattr(dist, name)) == _params(getattr(tdist, name))


@pytest.mark.parametrize("cls, methods", [
    ("Work", ["wait", "is_completed", "is_success", "exception", "get_future", "synchronize", "result",
              "source_rank"]),
    ("ProcessGroup", ["rank", "size"]),
    ("DeviceMesh", ["get_group", "size", "get_local_rank", "get_coordinate", "get_rank", "get_all_groups"]),
])
def test_classes_have_torchs_methods(cls, methods):
    for m in methods:
        assert hasattr(getattr(tdist, cls), m) and hasattr(getattr(dist, cls), m), m
    if cls == "DeviceMesh":
        for m in methods:
            assert _params(getattr(dist.DeviceMesh, m)) == _params(getattr(tdist.DeviceMesh, m)), m
        assert _params(dist.DeviceMesh.__init__) == _params(tdist.DeviceMesh.__init__)


def test_backend_debug_level_and_errors_behave_like_torchs():
    assert dist.Backend("GLOO") == tdist.Backend("GLOO") == "gloo" and dist.Backend.NCCL == tdist.Backend.NCCL
    assert [m.name for m in dist.DebugLevel] == list(tdist.DebugLevel.__members__)
    assert issubclass(dist.DistBackendError, dist.DistError) and issubclass(dist.DistStoreError, dist.DistError)
    assert dist.default_pg_timeout == tdist.default_pg_timeout
    for op in ("SUM", "MAX", "PRODUCT", "AVG"):
        assert dist.supports_complex(getattr(dist.ReduceOp, op)) == tdist.supports_complex(getattr(tdist.ReduceOp, op))
    assert dist.get_default_backend_for_device("cpu") == tdist.get_default_backend_for_device("cpu")


def test_the_new_names_work_in_a_rank_program():
    def fn(rank):
        out = {}
        a, b = np.full(2, float(rank)), np.full(3, rank, dtype=np.float64)
        dist.all_reduce_coalesced([a, b])
        out["coalesced"] = a.tolist() + b.tolist()
        outs = [[np.zeros(1), np.zeros(2)] for _ in range(4)]
        dist.all_gather_coalesced(outs, [np.full(1, float(rank)), np.full(2, 10.0 + rank)])
        out["gather_coalesced"] = [o[0][0] for o in outs] + [o[1][1] for o in outs]
        if rank == 0:
            dist.send_object_list([{"step": 3}, "x"], dst=1)
        elif rank == 1:
            objs = [None, None]
            out["objects"] = (dist.recv_object_list(objs, src=0), objs)
        mine, groups = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])
        out["enumerated"] = (mine.ranks, mine.rank(), mine.size(), len(groups))
        half = dist.split_group(split_ranks=[[0, 1], [2, 3]])
        out["split"] = half.ranks
        mesh = dist.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        t = np.ones(1)
        dist.all_reduce(t, group=mesh.get_group("tp"))
        out["mesh"] = (mesh.get_coordinate(), mesh["dp"].get_group().ranks, mesh.get_group(1).ranks, t[0],
                       mesh.size(), mesh.size(0))
        gathered = [None] * 4 if rank == 3 else None
        dist.gather_object(rank * 10, gathered, group_dst=3)
        out["gather_object"] = gathered
        out["env"] = (dist.get_node_local_rank(), dist.is_nccl_available(), dist.is_gloo_available(),
                      dist.is_torchelastic_launched(), dist.get_pg_count() >= 6, dist.get_backend_config())
        w = dist.all_reduce(np.ones(1), async_op=True)
        out["work"] = (w.wait(), w.exception(), w.get_future().wait()[0].tolist())
        return out

    res = run(fn, nprocs=4, cluster="cpu-host").results
    for rank, out in enumerate(res):
        assert out["coalesced"] == [6.0] * 5
        assert out["gather_coalesced"] == [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0]
        assert out["enumerated"] == ((0, 2) if rank % 2 == 0 else (1, 3), rank // 2, 2, 2)
        assert out["split"] == ((0, 1) if rank < 2 else (2, 3))
        coord = (rank // 2, rank % 2)
        assert out["mesh"] == (coord, (coord[1], coord[1] + 2), (2 * coord[0], 2 * coord[0] + 1), 2.0, 4, 2)
        assert out["gather_object"] == ([0, 10, 20, 30] if rank == 3 else None)
        assert out["env"] == (rank, False, True, False, True, "cpu:gloo")
        assert out["work"] == (True, None, [4.0])
    assert res[1]["objects"] == (0, [{"step": 3}, "x"])


def test_new_group_sort_ranks_and_local_synchronization():
    def fn(rank):
        g = dist.new_group([2, 0], sort_ranks=False)
        out = (g.ranks, dist.get_rank(g)) if rank in (0, 2) else g
        if rank in (0, 1):  # only the members call it, as torch allows
            local = dist.new_group([0, 1], use_local_synchronization=True)
            t = np.ones(1)
            dist.all_reduce(t, group=local)
            return out, local.ranks, t[0]
        return out, None, None

    res = run(fn, nprocs=3).results
    assert res[0] == (((2, 0), 1), (0, 1), 2.0)
    assert res[2] == (((2, 0), 0), None, None)
    assert res[1][0] is dist.GroupMember.NON_GROUP_MEMBER


@pytest.mark.parametrize("ranks, message", [([0.7, 1.2], "new_group: each rank must be an integer, got 0.7"),
                                            ([0, 0], "duplicate ranks"), ([5], "Rank 5 is out of range")])
def test_new_group_refuses_what_torch_would_misread(ranks, message):
    def fn(rank):
        dist.new_group(ranks)

    with pytest.raises(dist.DistError, match=message):
        run(fn)


def test_integer_like_ranks_are_accepted_and_bad_splits_are_argument_errors():
    def fn(rank):
        if rank == 0:
            dist.send(np.ones(1), dst=np.int64(1))
        else:
            dist.recv(np.zeros(1), src=np.int32(0))
        try:
            dist.all_to_all_single(np.zeros(2), np.zeros(2), input_split_sizes=[-1, 3])
        except dist.DistError as exc:
            return str(exc)

    for rank, msg in enumerate(run(fn).results):
        assert msg == (f"rank {rank}: all_to_all_single: input_split_sizes must be whole numbers >= 0, got [-1, 3]")


def test_new_subgroups_zero_says_zero():
    def fn(rank):
        dist.new_subgroups(0)

    with pytest.raises(dist.DistError, match=r"The arg 'group_size' \(0\) must be positive"):
        run(fn, nprocs=8)


def test_integer_tensors_are_ranks_as_in_torch():
    """torch accepts src=torch.tensor(0) (checked with gloo: broadcast, reduce, send, recv, group ranks); simcomm
    takes every one-element integer tensor or array and refuses float and bool ones (torch would truncate)."""
    import torch

    def fn(rank):
        t = torch.full((2,), float(rank))
        dist.broadcast(t, src=torch.tensor(1))
        dist.reduce(t, dst=np.array([0]))
        if rank == 0:
            dist.send(t, dst=torch.tensor([1]), tag=torch.tensor(3))
        else:
            dist.recv(t, src=torch.tensor(0, dtype=torch.uint8), tag=3)
        g = dist.new_group([torch.tensor(0), np.int16(1)])
        sizes = [torch.tensor(1), np.int64(1)]
        out = np.zeros(2)
        dist.all_to_all_single(out, np.array([rank, rank + 10.0]), sizes, sizes)
        errors = []
        for bad in (torch.tensor(0.0), torch.tensor(True), torch.tensor([0, 1]), np.array(1.0)):
            try:
                dist.broadcast(t, src=bad)
            except dist.DistError as exc:
                errors.append(str(exc))
        return (t.tolist(), dist.get_global_rank(g, torch.tensor(1)), dist.get_group_rank(g, np.int8(1)),
                out.tolist(), errors)

    res = run(fn).results
    assert res[1][:4] == ([2.0, 2.0], 1, 1, [10.0, 11.0])
    assert res[0][3] == [0.0, 1.0]
    assert res[1][4] == [f"src must be an integer, got {v}" for v in
                         ("tensor(0.)", "tensor(True)", "tensor([0, 1])", "array(1.)")]


@pytest.mark.parametrize("dtype", ["int16", "uint16", "uint32", "uint64", "float8_e4m3fn"])
def test_gloo_collectives_refuse_the_dtypes_torchs_gloo_cannot_carry(dtype):
    """Measured with torch 2.13 on gloo: every collective of these dtypes raises "Invalid scalar type" (gather
    also for complex); send and recv carry them. NCCL carries them all."""
    import torch

    def fn(rank):
        t = torch.zeros(2, dtype=getattr(torch, dtype))
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
        errors = []
        for call in (lambda: dist.broadcast(t, src=0), lambda: dist.all_gather_into_tensor(torch.cat([t, t]), t),
                     lambda: dist.gather(torch.zeros(2, dtype=torch.complex64),
                                         [torch.zeros(2, dtype=torch.complex64)] * 2 if rank == 0 else None)):
            try:
                call()
            except dist.DistError as exc:
                errors.append(":".join(str(exc).split(":")[:3]))
        return errors

    assert run(fn, cluster="cpu-host").results[1] == [f"rank 1: broadcast: Invalid scalar type {dtype}",
                                                      f"rank 1: all_gather: Invalid scalar type {dtype}",
                                                      "rank 1: gather: Invalid scalar type complex64"]
    assert run(fn, cluster="hgx-h100").results == [[], []]
