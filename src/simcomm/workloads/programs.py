"""Example rank programs for `workload: {kind: program}` scenarios; each runs unchanged on torch.distributed."""
from __future__ import annotations

import numbers

import numpy as np

import simcomm.distributed as dist


MAX_ELEMENTS, MAX_ROUNDS, MAX_WORK = 1 << 24, 1000, 1 << 26  # bounds that keep a run to seconds of wall time


def _whole(name: str, value, low: int, high: int) -> int:
    """value as a whole number from low to high, or a dist.DistError saying why (torch.distributed has one too, so
    the program still runs unchanged there)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        if isinstance(value, numbers.Integral) and abs(value) > 10 ** 30:
            shown = f"a {int(value).bit_length()}-bit whole number"
        else:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise dist.DistError(f"allreduce_check: {name} must be a whole number from {low} to {high}, got {shown}")
    return int(value)


def allreduce_check(rank: int, elements: int = 1 << 20, rounds: int = 2) -> float:
    """all_reduce rank-valued vectors `rounds` times, then broadcast and barrier; returns element 0 (numerics).
    elements: 1 to 2**24 per rank; rounds: 0 to 1000, at most 2**26 elements reduced in all (wall time)."""
    elements = _whole("elements", elements, 1, MAX_ELEMENTS)
    rounds = _whole("rounds", rounds, 0, MAX_ROUNDS)
    if elements * rounds > MAX_WORK:
        raise dist.DistError(f"allreduce_check: {elements} elements x {rounds} rounds is more than 2**26 elements "
                             "reduced per rank (minutes of wall time); use fewer of either")
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
