"""DualPipe and DualPipeV (DeepSeek-V3 technical report, arXiv 2412.19437, section 3.2.1; deepseek-ai/DualPipe):
micro-batches fed from both ends of the pipeline, a forward of one overlapped with a backward of another.

Both run, on each rank, the eight steps of deepseek-ai/DualPipe's `step` (torch.distributed.pipelining's
ScheduleDualPipeV ports DualPipeV's): forwards of phase 0 (1), of both phases (2), I, W and a forward of phase 1
(3), the main step of overlapped pairs, a phase-0 forward with a phase-1 backward then a phase-1 forward with a
phase-0 backward (4), a phase-1 backward and an overlapped pair (5), backwards of both phases, the second half
with their W deferred (6), a W and a phase-0 I (7), the remaining W's (8). The W's run in the order their I's ran
(DualPipe's WeightGradStore queue). A "backward" is a full backward (B), an I where the zero-bubble split is on.

- DualPipeV ("cut in half"): p ranks, 2p stages in a V (rank r holds stages r and 2p - 1 - r); phase 0 is chunk
  0 (down the V), phase 1 chunk 1 (back up). Needs m >= 2p micro-batches.
- DualPipe: p ranks (p even), p stages held twice: the first half of the micro-batches enter at rank 0 (chunk 0,
  stage r on rank r), the second half at rank p - 1 (chunk 1, stage p - 1 - r on rank r). Rank r runs the steps
  of DualPipeV's rank min(r, p - 1 - r) of p / 2 ranks over m / 2 micro-batches, phase 0 being the direction it
  is nearer the start of (chunk 0 on the first half of the ranks, chunk 1 on the second). Needs m even, >= 2p.

The first overlapped pair of DualPipeV's last rank (DualPipe's two middle ranks) runs as a forward then a
backward, as DeepSeek's code does ("to further reduce bubble size").
"""
from __future__ import annotations

from collections import defaultdict

from .actions import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Action, Overlap, Schedule


def dualpipev(pp: int, microbatches: int) -> Schedule:
    """DualPipeV: see the module docstring."""
    return [_steps(pp, rank, microbatches) for rank in range(pp)]


def dualpipe(pp: int, microbatches: int) -> Schedule:
    """DualPipe: see the module docstring."""
    half, ranks = microbatches // 2, pp // 2
    out = []
    for rank in range(pp):
        second = rank >= ranks
        acts = _steps(ranks, min(rank, pp - 1 - rank), half)

        def place(a: Action) -> Action:
            chunk = 1 - a.chunk if second else a.chunk
            return Action(a.phase, a.microbatch + half * chunk, chunk)
        out.append([Overlap(place(a.forward), place(a.backward)) if isinstance(a, Overlap) else place(a)
                    for a in acts])
    return out


def _steps(ranks: int, rank: int, n: int) -> list[Action | Overlap]:
    """DualPipeV's rank `rank` of `ranks` over n micro-batches, phase p as chunk p (module docstring)."""
    count: dict[tuple[str, int], int] = defaultdict(int)
    weights: list[tuple[int, int]] = []  # (chunk, microbatch) of the I's whose W is pending, in order
    acts: list[Action | Overlap] = []

    def make(phase: str, chunk: int) -> Action:
        key = (BACKWARD_INPUT if phase == BACKWARD else phase, chunk)  # a B takes the next I's micro-batch
        a = Action(phase, count[key], chunk)
        count[key] += 1
        if phase == BACKWARD_INPUT:
            weights.append((chunk, a.microbatch))
        return a

    def add(phase: str, chunk: int) -> None:
        acts.append(make(phase, chunk))

    def overlap(forward: int, backward: int) -> None:
        acts.append(Overlap(make(FORWARD, forward), make(BACKWARD, backward)))

    def weight() -> None:
        if weights:
            chunk, m = weights.pop(0)
            acts.append(Action(BACKWARD_WEIGHT, m, chunk))
    last = rank == ranks - 1
    for _ in range(2 * (ranks - rank - 1)):  # 1: F0
        add(FORWARD, 0)
    for _ in range(rank + 1):  # 2: F0 F1
        add(FORWARD, 0)
        add(FORWARD, 1)
    for _ in range(ranks - rank - 1):  # 3: I1 W F1
        add(BACKWARD_INPUT, 1)
        weight()
        add(FORWARD, 1)
    for i in range(n - 2 * ranks + rank + 1):  # 4: F0&B1, F1&B0
        if i == 0 and last:
            add(FORWARD, 0)
            add(BACKWARD, 1)
        else:
            overlap(0, 1)
        overlap(1, 0)
    for _ in range(ranks - rank - 1):  # 5: B1, F1&B0
        add(BACKWARD, 1)
        overlap(1, 0)
    split = False
    for i in range(rank + 1):  # 6: B1 B0, the second half split
        if i == (rank + 1) // 2 and rank % 2 == 1:
            split = True
        add(BACKWARD_INPUT if split else BACKWARD, 1)
        if i == (rank + 1) // 2 and rank % 2 == 0:
            split = True
        add(BACKWARD_INPUT if split else BACKWARD, 0)
    for _ in range(ranks - rank - 1):  # 7: W I0
        weight()
        add(BACKWARD_INPUT, 0)
    for _ in range(rank + 1):  # 8: W
        weight()
    return acts


__all__ = ["dualpipe", "dualpipev"]
