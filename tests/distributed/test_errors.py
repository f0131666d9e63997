"""Errors a rank program can hit: deadlocks, mismatches, bad arguments, failures. None of them may hang."""
import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist
from simcomm import clock
from simcomm.distributed.p2p import UnmatchedP2PWarning

from .helpers import run as _run

LIMIT_S = 20.0


def run(fn, nprocs=2, cluster="hgx-h100", args=()):
    """simcomm.spawn on a watchdog thread: a hang fails the test instead of stalling the suite."""
    return _run(fn, nprocs, cluster, args, LIMIT_S)


# ---- deadlocks ------------------------------------------------------------------------------------------------
def test_recv_recv_deadlock_names_every_blocked_rank():
    def fn(rank):
        dist.recv(np.zeros(2), src=1 - rank)

    with pytest.raises(simcomm.DeadlockError) as info:
        run(fn)
    msg = str(info.value)
    assert "rank 0 waits in recv(src=1)" in msg
    assert "rank 1 waits in recv(src=0)" in msg
    assert set(info.value.waiting) == {0, 1}
    assert info.value.waiting[0] == "recv(src=1)"


def test_send_send_deadlock():
    """Rendezvous sends: two ranks that both send first wait for each other, as on GPUs."""
    def fn(rank):
        dist.send(np.zeros(4, dtype=np.float32), dst=1 - rank)
        dist.recv(np.zeros(4, dtype=np.float32), src=1 - rank)

    with pytest.raises(simcomm.DeadlockError) as info:
        run(fn)
    msg = str(info.value)
    assert "rank 0 waits in send(dst=1" in msg
    assert "rank 1 waits in send(dst=0" in msg


def test_deadlock_after_time_has_passed_reports_when():
    def fn(rank):
        clock.sleep(0.5 * (rank + 1))
        dist.recv(np.zeros(1), src=(rank + 1) % 3)

    with pytest.raises(simcomm.DeadlockError) as info:
        run(fn, nprocs=3)
    msg = str(info.value)
    assert "t=1500000.000 us" in msg
    for r in range(3):
        assert f"rank {r} waits in recv(src={(r + 1) % 3})" in msg


def test_recv_from_a_rank_that_finished():
    def fn(rank):
        if rank == 1:
            dist.recv(np.zeros(1), src=0, tag=5)

    with pytest.raises(simcomm.DeadlockError) as info:
        run(fn)
    msg = str(info.value)
    assert "rank 1 waits in recv(src=0, tag=5)" in msg and "rank 0 has finished" in msg


def test_collective_some_ranks_never_call():
    def fn(rank):
        if rank != 2:
            dist.all_reduce(np.zeros(2))

    with pytest.raises(simcomm.DeadlockError) as info:
        run(fn, nprocs=4)
    msg = str(info.value)
    for r in (0, 1, 3):
        assert f"rank {r} waits in all_reduce" in msg
    assert "waiting for rank 2" in msg
    assert "rank 2 has finished" in msg
    assert set(info.value.waiting) == {0, 1, 3}


def test_collective_several_missing_ranks():
    def fn(rank):
        if rank in (0, 2):
            dist.barrier()

    with pytest.raises(simcomm.DeadlockError) as info:
        run(fn, nprocs=4)
    msg = str(info.value)
    assert "waiting for ranks 1, 3" in msg and "ranks 1, 3 have finished" in msg


def test_unwaited_irecv_does_not_hang_and_is_named_in_a_warning():
    """A rank may leave with a posted irecv nobody matches: the run ends when all ranks return, with a warning
    naming it (NCCL would hang at teardown)."""
    def fn(rank):
        if rank == 0:
            dist.irecv(np.zeros(1), src=1)
            dist.isend(np.zeros(3, np.float32), dst=1, tag=4)
        return rank

    with pytest.warns(UnmatchedP2PWarning, match=r"2 isend/irecv never matched.*rank 0: recv\(src=1, float64\[1\]\); "
                                                  r"rank 0: send\(dst=1, tag=4, float32\[3\]\)"):
        assert run(fn).results == [0, 1]


# ---- bad arguments --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["send", "recv", "isend", "irecv"])
def test_p2p_with_self_is_a_value_error(op):
    def fn(rank):
        if rank == 1:
            getattr(dist, op)(np.zeros(1), rank)

    with pytest.raises(simcomm.DistError) as info:
        run(fn)
    assert isinstance(info.value, ValueError)
    assert "rank 1" in str(info.value) and "itself" in str(info.value)


@pytest.mark.parametrize("peer", [2, 7, -1])
def test_p2p_rank_out_of_range(peer):
    def fn(rank):
        if rank == 0:
            dist.send(np.zeros(1), dst=peer)

    with pytest.raises(ValueError) as info:
        run(fn)
    assert isinstance(info.value, simcomm.DistError)
    assert f"dst {peer}" in str(info.value) and "0 to 1" in str(info.value)


def test_recv_src_out_of_range():
    def fn(rank):
        dist.recv(np.zeros(1), src=9)

    with pytest.raises(simcomm.DistError, match="src 9 is out of range"):
        run(fn)


def test_send_needs_a_destination():
    def fn(rank):
        dist.send(np.zeros(1))

    with pytest.raises(simcomm.DistError, match="Must specify either dst or group_dst"):
        run(fn)


def test_send_recv_size_mismatch_names_both_ranks():
    def fn(rank):
        if rank == 0:
            dist.send(np.zeros(2, dtype=np.float32), dst=1)
        else:
            dist.recv(np.zeros(3, dtype=np.float32), src=0)

    with pytest.raises(simcomm.MismatchError) as info:
        run(fn)
    msg = str(info.value)
    assert "rank 0" in msg and "rank 1" in msg
    assert "float32[2]" in msg and "float32[3]" in msg


def test_send_recv_dtype_mismatch():
    def fn(rank):
        if rank == 0:
            dist.send(np.zeros(2, dtype=np.float32), dst=1)
        else:
            dist.recv(np.zeros(1, dtype=np.float64), src=0)  # same bytes, other dtype

    with pytest.raises(simcomm.MismatchError) as info:
        run(fn)
    msg = str(info.value)
    assert "rank 0" in msg and "rank 1" in msg and "float32" in msg and "float64" in msg


def test_same_size_other_shape_is_accepted():
    """torch checks bytes and dtype, not shape: a flat recv of a 2x2 send is fine."""
    def fn(rank):
        if rank == 0:
            dist.send(np.arange(4.0).reshape(2, 2), dst=1)
        else:
            t = np.zeros(4)
            dist.recv(t, src=0)
            return t.tolist()

    assert run(fn).results[1] == [0.0, 1.0, 2.0, 3.0]


# ---- mismatched collectives -----------------------------------------------------------------------------------
def _collective_mismatch(fn, nprocs=3):
    with pytest.raises(simcomm.MismatchError) as info:
        run(fn, nprocs=nprocs)
    return str(info.value)


def test_all_reduce_against_broadcast():
    def fn(rank):
        t = np.zeros(2)
        if rank == 1:
            dist.broadcast(t, src=0)
        else:
            dist.all_reduce(t)

    msg = _collective_mismatch(fn)
    assert msg.startswith("rank 1: collective mismatch")  # the odd one out is blamed
    assert "ranks 0, 2 called all_reduce" in msg and "rank 1 called broadcast" in msg


def test_different_shapes():
    def fn(rank):
        dist.all_reduce(np.zeros(2 + (rank == 2)))

    msg = _collective_mismatch(fn)
    assert "ranks 0, 1 called all_reduce(shape=[2]" in msg
    assert "rank 2 called all_reduce(shape=[3]" in msg


def test_different_dtypes():
    def fn(rank):
        dist.all_gather([np.zeros(2)] * 3 if rank else [np.zeros(2, np.float32)] * 3,
                        np.zeros(2, np.float32 if rank == 0 else np.float64))

    msg = _collective_mismatch(fn)
    assert msg.startswith("rank 0: ")
    assert "rank 0 called all_gather(shape=[2], dtype=float32" in msg
    assert "ranks 1, 2 called all_gather(shape=[2], dtype=float64" in msg


def test_different_ops():
    def fn(rank):
        dist.all_reduce(np.zeros(2), op=dist.ReduceOp.MAX if rank == 1 else dist.ReduceOp.SUM)

    msg = _collective_mismatch(fn)
    assert "op=SUM" in msg and "op=MAX" in msg and "rank 1 called" in msg and "ranks 0, 2 called" in msg


def test_different_roots():
    def fn(rank):
        dist.broadcast(np.zeros(2), src=1 if rank == 0 else 0)

    msg = _collective_mismatch(fn)
    assert msg.startswith("rank 0: ")
    assert "rank 0 called broadcast(shape=[2], dtype=float64, data=values, root=1)" in msg
    assert "ranks 1, 2 called broadcast(shape=[2], dtype=float64, data=values, root=0)" in msg


def test_different_reduce_destinations():
    def fn(rank):
        dist.reduce(np.zeros(2), dst=2 if rank == 2 else 0)

    msg = _collective_mismatch(fn)
    assert "root=0" in msg and "root=2" in msg and "rank 2" in msg


def test_mismatch_in_a_later_call_is_numbered():
    def fn(rank):
        dist.barrier()
        dist.all_reduce(np.zeros(4 if rank else 5))

    msg = _collective_mismatch(fn, nprocs=2)
    assert "call #2" in msg


# ---- failures inside a rank -----------------------------------------------------------------------------------
def test_user_exception_becomes_rank_failed():
    def fn(rank):
        if rank == 2:
            raise KeyError("boom")
        dist.barrier()  # the others wait for rank 2, which never comes

    with pytest.raises(simcomm.RankFailed) as info:
        run(fn, nprocs=4)
    err = info.value
    assert err.rank == 2 and "rank 2" in str(err) and "KeyError" in str(err)
    assert isinstance(err.__cause__, KeyError) and err.original is err.__cause__


def test_user_exception_after_communication():
    def fn(rank):
        t = np.ones(1)
        dist.all_reduce(t)
        if rank == 1:
            raise ZeroDivisionError(f"saw {t[0]}")
        return t[0]

    with pytest.raises(simcomm.RankFailed, match=r"rank 1 raised ZeroDivisionError: saw 2.0"):
        run(fn)


def test_catching_exceptions_inside_a_rank_does_not_swallow_aborts():
    def fn(rank):
        try:
            if rank == 0:
                raise RuntimeError("first")
            dist.recv(np.zeros(1), src=0)
        except Exception:  # noqa: BLE001 - user code that catches everything
            if rank == 0:
                raise
            return "swallowed"

    with pytest.raises(simcomm.RankFailed) as info:
        run(fn)
    assert info.value.rank == 0


def test_a_failed_run_leaves_nothing_behind():
    def bad(rank):
        dist.recv(np.zeros(1), src=1 - rank)

    with pytest.raises(simcomm.DeadlockError):
        run(bad)
    assert run(lambda rank: rank * 2, nprocs=3).results == [0, 2, 4]


def test_dist_outside_spawn_is_a_clear_error():
    with pytest.raises(simcomm.SimcommError, match="outside a simulated rank program"):
        dist.get_rank()


def test_bitwise_op_on_floats():
    def fn(rank):
        dist.all_reduce(np.ones(2), op=dist.ReduceOp.BAND)

    with pytest.raises(simcomm.SimcommError, match="Cannot use ReduceOp.BAND with non-integral dtype"):
        run(fn, cluster="cpu-host")


def test_nccl_refuses_bitwise_ops_and_avg_of_booleans():
    """torch's ProcessGroupNCCL has no bitwise reductions and refuses AVG of bool tensors."""
    def bitwise(rank):
        dist.all_reduce(np.ones(2, dtype=np.int32), op=dist.ReduceOp.BOR)

    def avg_bool(rank):
        dist.all_reduce(np.ones(2, dtype=bool), op=dist.ReduceOp.AVG)

    with pytest.raises(simcomm.AlgorithmError, match="rank 0: all_reduce: Cannot use ReduceOp.BOR with NCCL"):
        run(bitwise)
    with pytest.raises(simcomm.AlgorithmError, match="Cannot use ReduceOp.AVG with boolean inputs"):
        run(avg_bool)
    with pytest.raises(simcomm.AlgorithmError, match="AVG on bool tensors fails on gloo"):
        run(avg_bool, cluster="cpu-host")


def test_not_a_tensor():
    def fn(rank):
        dist.all_reduce([1.0, 2.0])

    with pytest.raises(simcomm.DistError, match="rank 0: all_reduce: tensor: expected a numpy array.*got list"):
        run(fn)


# ---- list arguments, with torch's wording ---------------------------------------------------------------------
def test_all_gather_wrong_list_size():
    def fn(rank):
        dist.all_gather([np.zeros(2) for _ in range(2)], np.zeros(2))

    with pytest.raises(ValueError, match="Incorrect output list size 2. Output list size should be 3"):
        run(fn, nprocs=3)


def test_gather_wrong_list_size():
    def fn(rank):
        dist.gather(np.zeros(2), [np.zeros(2)] * 4 if rank == 0 else None, dst=0)

    with pytest.raises(ValueError, match="Incorrect gather list size 4. Gather list size should be 3"):
        run(fn, nprocs=3)


def test_scatter_wrong_list_size():
    def fn(rank):
        dist.scatter(np.zeros(2), [np.zeros(2)] * 2 if rank == 0 else None, src=0)

    with pytest.raises(ValueError, match="Incorrect scatter list size 2. Scatter list size should be 3"):
        run(fn, nprocs=3)


def test_reduce_scatter_wrong_list_size():
    def fn(rank):
        dist.reduce_scatter(np.zeros(2), [np.zeros(2)] * 2)

    with pytest.raises(ValueError, match="Incorrect input list size 2. Input list size should be 3"):
        run(fn, nprocs=3)


def test_gather_list_on_non_destination():
    def fn(rank):
        dist.gather(np.zeros(2), [np.zeros(2) for _ in range(3)], dst=0)

    with pytest.raises(ValueError, match=r"Argument ``gather_list`` must NOT be specified on non-destination ranks"):
        run(fn, nprocs=3)


def test_scatter_list_on_non_source():
    def fn(rank):
        dist.scatter(np.zeros(2), [np.zeros(2) for _ in range(3)], src=0)

    with pytest.raises(ValueError, match=r"Argument ``scatter_list`` must NOT be specified on non-source ranks"):
        run(fn, nprocs=3)


def test_gather_list_missing_on_destination():
    def fn(rank):
        dist.gather(np.zeros(2), None, dst=1)

    with pytest.raises(ValueError, match=r"Argument ``gather_list`` must be specified on destination rank"):
        run(fn, nprocs=3)


def test_scatter_list_missing_on_source():
    def fn(rank):
        dist.scatter(np.zeros(2), None, src=0)

    with pytest.raises(ValueError, match=r"Argument ``scatter_list`` must be specified on source rank"):
        run(fn, nprocs=3)


def test_list_item_of_other_dtype():
    def fn(rank):
        dist.all_gather([np.zeros(2), np.zeros(2, np.float32)], np.zeros(2))

    with pytest.raises(simcomm.DistError, match=r"different dtypes: tensor_list\[1\] is float32, expected float64"):
        run(fn)


def test_bfloat16_torch_data_is_refused_clearly():
    def fn(rank):
        import torch
        dist.all_reduce(torch.ones(4, dtype=torch.bfloat16))

    with pytest.raises(simcomm.DistError, match="rank 0: all_reduce: tensor: simcomm cannot reduce the data of "
                                                "bfloat16 tensors"):
        run(fn)


def test_bfloat16_size_only_is_fine():
    def fn(rank):
        dist.all_reduce(simcomm.size_only(4, dtype="bfloat16"))

    assert run(fn).elapsed > 0
