"""Example rank programs for `workload: {kind: program}` scenarios; each runs unchanged on torch.distributed."""
from __future__ import annotations

import numpy as np

import simcomm.distributed as dist


def allreduce_check(rank: int, elements: int = 1 << 20, rounds: int = 2) -> float:
    """all_reduce rank-valued vectors `rounds` times, then broadcast and barrier; returns element 0 (numerics)."""
    dist.init_process_group("gloo")
    n = dist.get_world_size()
    x = np.full(elements, float(rank + 1), dtype=np.float32)
    for _ in range(rounds):
        dist.all_reduce(x)
        x /= n
    dist.broadcast(x, src=0)
    dist.barrier()
    return float(x[0])


def ring_exchange(rank: int, nbytes: int = 1 << 20) -> int:
    """Each rank sends a buffer to the next and receives from the previous (even ranks send first)."""
    dist.init_process_group("nccl")
    n = dist.get_world_size()
    out = np.full(nbytes // 4, rank, dtype=np.int32)
    got = np.empty_like(out)
    if rank % 2 == 0:
        dist.send(out, (rank + 1) % n)
        dist.recv(got, (rank - 1) % n)
    else:
        dist.recv(got, (rank - 1) % n)
        dist.send(out, (rank + 1) % n)
    return int(got[0])
