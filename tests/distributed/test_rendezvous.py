"""Errors a collective call reveals are raised in every rank of the call, blaming the rank at fault (issue 13)."""
import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist

from .helpers import run


@pytest.mark.parametrize("cluster, op, dtype, message", [
    ("cpu-host", "BAND", np.float32, "Cannot use ReduceOp.BAND with non-integral dtype"),
    ("cpu-host", "AVG", np.int32, "AVG on int32 tensors fails on gloo"),
    ("hgx-h100", "BXOR", np.int32, "Cannot use ReduceOp.BXOR with NCCL"),
])
def test_argument_errors_are_raised_in_every_rank(cluster, op, dtype, message):
    """A program that catches the error goes on in every rank; nobody is left waiting for the others."""
    def fn(rank):
        try:
            dist.all_reduce(np.ones(2, dtype=dtype), op=getattr(dist.ReduceOp, op))
        except simcomm.SimcommError as exc:
            caught = str(exc)
        dist.barrier()
        return caught

    for rank, caught in enumerate(run(fn, nprocs=4, cluster=cluster).results):
        assert caught.startswith(f"rank {rank}: all_reduce: ") and message in caught


def test_errors_only_the_whole_call_reveals_reach_every_rank():
    """Split sizes that do not pair up are known only when all arrived: every rank gets the error, naming the
    sender at fault."""
    def fn(rank):
        out_splits = [1, 1, 1] if rank != 2 else [2, 1, 0]
        try:
            dist.all_to_all_single(np.zeros(3), np.zeros(3), output_split_sizes=out_splits)
        except simcomm.DistError as exc:
            return str(exc)
        return "no error"

    results = run(fn, nprocs=3).results
    assert len(set(results)) == 1
    assert results[0].startswith("rank 0: all_to_all size mismatch on WORLD: group rank 0 sends 1 elements to "
                                 "group rank 2 (rank 2), which expects 2")


def test_a_mismatch_is_raised_in_every_rank_of_the_call():
    def fn(rank):
        try:
            dist.all_reduce(np.zeros(2 + (rank == 3)))
        except simcomm.MismatchError as exc:
            return str(exc)

    results = run(fn, nprocs=4).results
    assert len(set(results)) == 1 and results[0].startswith("rank 3: collective mismatch")


def test_premul_sum_scales_each_rank_by_its_own_factor():
    """NCCL premultiplies each rank's input by that rank's factor: 1*1 + 1*2 + 1*3 + 1*4 = 10 on every rank."""
    def fn(rank):
        t = np.ones(1, np.float32)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(rank + 1.0))
        r = np.full(2, 2.0)
        dist.reduce_scatter_tensor(r[:1], np.full(4, 1.0), op=dist._make_nccl_premul_sum(0.5 * rank))
        return t[0], r[0]

    assert run(fn, nprocs=4).results == [(10.0, 3.0)] * 4


def test_premul_sum_is_refused_on_gloo():
    def fn(rank):
        dist.all_reduce(np.ones(1), op=dist._make_nccl_premul_sum(2.0))

    with pytest.raises(simcomm.AlgorithmError, match="PREMUL_SUM is only supported by the nccl backend"):
        run(fn, cluster="cpu-host")


def test_deadlock_report_says_who_disagrees_when_a_rank_never_arrives():
    def fn(rank):
        if rank == 2:
            dist.recv(np.zeros(1), src=0)
        dist.all_reduce(np.zeros(2 + rank))

    with pytest.raises(simcomm.DeadlockError, match="waiting for rank 2; they disagree: rank 0 called "
                                                    r"all_reduce\(shape=\[2\]"):
        run(fn, nprocs=3)


@pytest.mark.parametrize("failing", [0, 3])
def test_a_mismatch_from_cleanup_code_names_the_exception_being_handled(failing):
    """Rank `failing` raises, then its `finally: dist.barrier()` meets the others' all_reduce: the MismatchError
    says what it was handling (it was only in __context__), whether it arrives first (0) or last (3)."""
    def fn(rank):
        try:
            if rank == failing:
                raise RuntimeError("boom")
            dist.all_reduce(np.ones(2))
        finally:
            dist.barrier()

    with pytest.raises(simcomm.MismatchError) as info:
        run(fn, nprocs=4, cluster="cpu-host")
    assert str(info.value) == (
        f"rank {failing}: collective mismatch on WORLD at call #1: ranks {', '.join(str(r) for r in range(4) if r != failing)} "
        f"called all_reduce(shape=[2], dtype=float64, data=values, op=SUM); rank {failing} called barrier() "
        f"(rank {failing} while handling RuntimeError: boom)")


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, "float8_e4m3fn"])
def test_premul_sum_refuses_what_nccl_cannot_premultiply(dtype):
    """ProcessGroupNCCL builds PREMUL_SUM for half, float, bfloat16 and double only (integer factors would
    truncate: 1 * 0.5 gave 0 per rank). Not checkable here without a GPU: the message is ProcessGroupNCCL's own
    (torch raises it as a TypeError)."""
    def fn(rank):
        t = simcomm.size_only(2, dtype=dtype) if isinstance(dtype, str) else np.ones(2, dtype=dtype)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))

    with pytest.raises(simcomm.AlgorithmError, match=r"rank 0: all_reduce: PreMulSum Data type must be half, float, "
                                                     r"bfloat16 or double .*got (u?int|bool|float8)"):
        run(fn)


def test_premul_sum_takes_every_floating_dtype_and_complex():
    def fn(rank):
        out = []
        for t in (np.ones(2, np.float16), np.ones(2, np.float64), np.ones(2, np.complex64),
                  simcomm.size_only(2, dtype="bfloat16")):
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
            out.append(None if isinstance(t, simcomm.SizeOnly) else t.tolist())
        return out

    assert run(fn).results[1] == [[1.0, 1.0], [1.0, 1.0], [1 + 0j, 1 + 0j], None]


@pytest.mark.parametrize("backend, cluster, ok", [
    ("gloo", "hgx-h100", True), ("nccl", "hgx-h100", False), (None, "hgx-h100", False),
    ("cpu:gloo,cuda:nccl", "hgx-h100", False), ("cpu:gloo,cuda:nccl", "cpu-host", True), ("nccl", "cpu-host", False),
    (None, "cpu-host", True)])
def test_argument_rules_follow_the_backend_asked_for(backend, cluster, ok):
    """init_process_group("gloo") on a GPU cluster applied NCCL's rules (BAND refused); now the backend asked for
    decides (for a device list, the one for the cluster's devices), else the cluster's devices."""
    def fn(rank):
        if backend:
            dist.init_process_group(backend)
        t = np.array([3, 6], dtype=np.int32) + rank
        dist.all_reduce(t, op=dist.ReduceOp.BAND)
        return t.tolist()

    if ok:
        assert run(fn, cluster=cluster).results == [[0, 6], [0, 6]]  # 3 & 4, 6 & 7
    else:
        with pytest.raises(simcomm.AlgorithmError, match="rank 0: all_reduce: Cannot use ReduceOp.BAND with NCCL"):
            run(fn, cluster=cluster)


def test_gloo_asked_for_on_a_gpu_cluster_refuses_premul_sum_and_integer_avg():
    def fn(rank, op, dtype):
        dist.init_process_group("gloo")
        dist.all_reduce(np.ones(2, dtype=dtype), op=op)

    with pytest.raises(simcomm.AlgorithmError, match="PREMUL_SUM is only supported by the nccl backend"):
        run(fn, args=(dist._make_nccl_premul_sum(2.0), np.float32))
    with pytest.raises(simcomm.AlgorithmError, match="AVG on int32 tensors fails on gloo"):
        run(fn, args=(dist.ReduceOp.AVG, np.int32))
