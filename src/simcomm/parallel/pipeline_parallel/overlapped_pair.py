"""DualPipe's overlapped forward-and-backward pair (DeepSeek-V3 technical report, arXiv 2412.19437, section 3.2.1
and figure 4): one micro-batch's forward chunk and another's backward chunk run together on a rank so that each
one's expert-parallel all-to-alls (dispatch and combine) hide behind the other's compute.

Each pass is a chain of what its layer templates did on the compute stream, in order (Template.blocks): kernels,
and waits on the experts' exchanges (EP and ETP: the only communication the pair interleaves; a wait on TP or CP
communication stays in its chain as the compute stream's time). The pair runs the two chains on two streams, as
DeepSeek's hand-ordered kernels do: one compute stream, and the communication SMs that run one exchange at a time
(both exchanges cross the same links). Each block starts as soon as its chain's previous block has ended and its
stream is free; when both chains have a block ready for the same stream, the chain with more work left goes
first (the critical path: a backward with its recomputation is the longer, and the forward's blocks fill its
gaps: attention of one beside the dispatch of the other, the MLP of one beside the combine of the other, as in
the report's figure 4), the other chain than last time on a tie. So at every instant one stream is busy, and
with communication costing no compute the pair never takes longer than its two passes one after the other.

While an exchange runs, its SMs (`held`: DeepEP's moe_deepep_num_sms, DeepSeek's 20 of 132; NCCL's channels
for the alltoall dispatcher) are not there for the kernels beside it: each template's kernels slow by the engine's
interference model (engine/sharing.py, through its Mix), with `margin` the SMs they were sized around.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...engine import IDLE_KERNEL, Mix

EXCHANGE_AXES = ("ep", "etp")


@dataclass(frozen=True)
class Block:
    """A stretch of one pass: kernels (`comm` False; `factor`: how much longer beside the exchanges' SMs) or a
    wait on the experts' exchanges, `offset` seconds into the pass."""

    comm: bool
    seconds: float
    offset: float
    factor: float = 1.0


@dataclass(frozen=True)
class PairTiming:
    """The pair's time; `idle`: the compute stream waiting for exchanges; `slowed`: how much longer its kernels
    ran beside the other chain's exchanges; `maps[c]`: chain c's (pass offsets, pair offsets) breakpoints."""

    duration: float
    idle: float
    slowed: float
    maps: tuple[tuple[np.ndarray, np.ndarray], ...]


def slowed(took: float, alone: float) -> float:
    """How much longer work took than alone: never below 0 (now - start can round a hair under `alone` when
    nothing slowed it, which made a breakdown's interference -1.5e-20 s)."""
    return max(0.0, took - alone)


def chain(p, factor) -> list[Block]:
    """Pass p as Blocks; factor(template) is its kernels' slowdown beside the exchanges."""
    out: list[Block] = []
    for part in p.parts:
        tpl, at = part.template, part.offset
        f = factor(tpl)
        for kind, secs in tpl.blocks or (("compute", tpl.duration),):
            comm = kind in EXCHANGE_AXES
            if out and out[-1].comm == comm and (comm or out[-1].factor == f):
                last = out[-1]
                out[-1] = Block(comm, last.seconds + secs, last.offset, f)
            else:
                out.append(Block(comm, secs, at, f))
            at += secs
    return out


def has_exchanges(p) -> bool:
    """Whether pass p waits on the experts' exchanges anywhere (its chain has a wait to interleave)."""
    return any(part.template.exposed.get(axis, 0.0) > 0 for part in p.parts for axis in EXCHANGE_AXES)


def kernel_factor(held: int, margin: int, sms: int, hbm: float):
    """factor(template): its kernels' time beside `held` SMs of exchanges over their time alone (1 when nothing
    is held)."""
    cache: dict = {}

    def factor(tpl) -> float:
        if held <= 0 or tpl.mix is None:
            return 1.0
        got = cache.get(id(tpl))
        if got is None:
            pairs = [(w, k) for w, k in zip(tpl.mix.weights, tpl.mix.kernels) if k != IDLE_KERNEL and w > 0]
            got = Mix(*zip(*pairs)).wall((held, margin), sms, hbm)[-1] if pairs else 1.0
            cache[id(tpl)] = got
        return got
    return factor


def overlap_pair(first: list[Block], second: list[Block]) -> PairTiming:
    """Two chains on a compute stream and a communication stream (see the module docstring)."""
    chains = (first, second)
    nxt = [0, 0]  # each chain's next block
    busy = [False, False]  # a block of the chain is running
    points = ([], [])  # per chain: (pass offset, pair time) at each block's ends
    running = {}  # stream -> [chain, block, work left: seconds alone for kernels, seconds for an exchange, start]
    now, last_compute, slowed, computing = 0.0, 1, 0.0, 0.0

    left = [sum(b.seconds for b in ch) for ch in chains]  # each chain's work not yet started

    def start(stream: str) -> None:
        nonlocal last_compute
        order = sorted((1 - last_compute, last_compute), key=lambda c: -left[c])  # the longer chain's first
        for c in order:
            if busy[c] or nxt[c] >= len(chains[c]):
                continue
            b = chains[c][nxt[c]]
            if b.comm == (stream == "comm"):
                running[stream] = [c, b, b.seconds, now]
                busy[c] = True
                nxt[c] += 1
                left[c] -= b.seconds
                if stream == "compute":
                    last_compute = c
                return

    while True:
        for stream in ("compute", "comm"):
            if stream not in running:
                start(stream)
        if not running:
            break
        beside = "comm" in running
        rate = {s: 1.0 for s in running}
        if "compute" in running and beside:
            rate["compute"] = 1.0 / running["compute"][1].factor
        dt = min(r[2] / rate[s] for s, r in running.items())
        now += dt
        for s in list(running):
            r = running[s]
            r[2] -= dt * rate[s]
            if s == "compute":
                computing += dt
                slowed += dt - dt * rate[s]
            if r[2] <= 1e-12 * r[1].seconds:  # done (to rounding)
                c, b, _, began = r
                points[c].append((b.offset, b.offset + b.seconds, began, now))
                busy[c] = False
                del running[s]
    maps = []
    for pts in points:
        xs = np.array([x for a, b_, _s, _e in pts for x in (a, b_)])
        ys = np.array([y for _a, _b, s, e in pts for y in (s, e)])
        maps.append((xs, ys))
    return PairTiming(now, now - computing, slowed, tuple(maps))


def pair_bound(first: list[Block], second: list[Block]) -> float:
    """A lower bound of overlap_pair's time, whatever the interference: each chain alone, the kernels of both on one
    compute stream, the exchanges of both on one communication stream."""
    compute = sum(b.seconds for b in first + second if not b.comm)
    return max(compute, sum(b.seconds for b in first + second) - compute, sum(b.seconds for b in first),
               sum(b.seconds for b in second))


class PairProgress:
    """A pass's progress inside an overlapped pair: its offsets mapped to the pair's (PairTiming.maps), then
    through the pair's compute job (engine/progress.py) to simulated times."""

    def __init__(self, inner, xs: np.ndarray, ys: np.ndarray):
        self.inner, self.xs, self.ys = inner, xs, ys

    @property
    def ranks(self) -> list[int]:
        return self.inner.ranks

    def times(self, rank: int, offsets) -> np.ndarray:
        offsets = np.asarray(offsets, dtype=np.float64)
        if not len(self.xs):
            return self.inner.times(rank, np.zeros(offsets.shape))
        return self.inner.times(rank, np.interp(offsets, self.xs, self.ys))


__all__ = ["Block", "PairProgress", "PairTiming", "chain", "has_exchanges", "kernel_factor", "overlap_pair",
           "pair_bound", "slowed"]
