"""Timing real gloo (torch.distributed, one process per rank on this host): ping-pong and collective sweeps.

Each point is timed the way nccl-tests times it: a barrier, then `iters` back-to-back calls, the mean per call on
each rank, the slowest rank's mean. Every point is measured in `rounds` rounds, the rounds sweeping over all the
points in turn (so each point is sampled at several moments of a shared host's load), and the fastest round is
kept: other processes on the host only ever slow a round down. The spread of the rounds is kept as the noise.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from ..torch_runner import run_real

COLLECTIVES = ("all_reduce", "all_gather", "broadcast")


@dataclass
class Measurement:
    collective: str  # "all_reduce", "all_gather", "broadcast" or "sendrecv" (ping-pong: one way)
    ranks: int
    size: int  # nccl-tests' S in bytes
    time: float  # seconds, fastest round
    rounds: list = field(default_factory=list)  # every round's seconds

    @property
    def spread(self) -> float:
        """median round / fastest round - 1: how much the host's load slowed this point typically."""
        return statistics.median(self.rounds) / self.time - 1 if self.rounds and self.time > 0 else 0.0


def _op(dist, rank, n, kind, size):
    import torch
    numel = max(1, size // 4)
    if kind == "all_gather":
        inp, outp = torch.ones(max(1, size // 4 // n)), torch.empty(max(1, size // 4 // n) * n)  # S: gathered
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # torch 2.13 renamed it
        return lambda: gather(outp, inp)
    t = torch.ones(numel)
    if kind == "all_reduce":
        return lambda: dist.all_reduce(t)
    if kind == "broadcast":
        return lambda: dist.broadcast(t, src=0)

    def pingpong():  # ranks 0 and 1; the time is halved below
        if rank == 0:
            dist.send(t, 1)
            dist.recv(t, 1)
        elif rank == 1:
            dist.recv(t, 0)
            dist.send(t, 0)
    return pingpong


def _bench(rank, dist, points, budget, rounds):
    """In each rank's process: time every (collective, size) point; returns [(collective, size, [seconds])]."""
    import torch
    n = dist.get_world_size()
    ops, iters = [], []
    for kind, size in points:
        op = _op(dist, rank, n, kind, size)
        op()  # warm-up (connections, buffers)
        dist.barrier()
        t0 = time.perf_counter()
        op()
        probe = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(probe, op=dist.ReduceOp.MAX)  # every rank must agree on the iteration count
        ops.append(op)
        iters.append(int(max(1, min(50, budget / max(probe.item(), 1e-7)))))
    samples = [[] for _ in points]
    for _ in range(rounds):
        for i, (kind, _size) in enumerate(points):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters[i]):
                ops[i]()
            mine = torch.tensor([(time.perf_counter() - t0) / iters[i]], dtype=torch.float64)
            dist.all_reduce(mine, op=dist.ReduceOp.MAX)
            samples[i].append(mine.item() / (2 if kind == "sendrecv" else 1))
    return [(kind, size, s) for (kind, size), s in zip(points, samples)]


def measure_gloo(sizes, world_sizes=(2, 3, 4), collectives=COLLECTIVES, *, pingpong: bool = True,
                 rounds: int = 7, budget: float = 0.01, timeout: float = 900) -> list[Measurement]:
    """Measure every collective at every size on every world size (plus 2-rank ping-pong); one run per size."""
    out: list[Measurement] = []
    for n in world_sizes:
        points = [(k, s) for k in collectives for s in sizes]
        if pingpong and n == 2:
            points += [("sendrecv", s) for s in sizes]
        per_rank = run_real(_bench, (points, budget, rounds), nprocs=n, timeout=timeout)
        for kind, size, samples in per_rank[0]:
            out.append(Measurement(kind, n, size, min(samples), list(samples)))
    return out
