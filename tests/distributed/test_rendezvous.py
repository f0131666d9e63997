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
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(rank + 1))
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
