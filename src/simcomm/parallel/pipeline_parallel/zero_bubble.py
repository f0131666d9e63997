"""Zero-bubble schedules: the backward split into I (input gradient, on the critical path between stages) and W
(weight gradient, needed by no other stage), W placed where 1F1B would idle.

- Interleaved zero bubble (torch.distributed.pipelining's ScheduleInterleavedZeroBubble, Qi et al. 2023's ZB1P):
  as torch's interleaved 1F1B (rounds of max(1, m // p) micro-batches through each chunk in turn) with a warm-up
  of (v - 1) x round + (p - 1 - r) forwards on rank r, then a forward and an I per step, each rank's W's trailing
  its I's by r steps and closing the schedule. With one chunk this is ZB-H1 (Qi et al. 2023, Figure 3): the
  warm-up of 1F1B, at most p micro-batches waiting for their W on every rank (1F1B's memory), and a bubble of
  (p - 1)(T_F + T_I - T_W).
- ZB-H2 (Qi et al. 2023, Figure 3): 2(p - r) - 1 warm-up forwards on rank r fill the bubble before the first I,
  and the W's of the tail are deferred so that the schedule becomes a parallelogram, at most 2p - 1 micro-batches
  in flight (about twice 1F1B's memory). Built as the paper's handcrafted layout arises for T_F = T_I = T_W: each
  rank, whenever it is free, runs its next I if the gradient is there, else its next forward if the activation is
  there and fewer than 2p - 1 micro-batches await their W, else its oldest pending W (simulated with unit times;
  the resulting order is the schedule).
- ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory", the V-shape placement, and
  torch.distributed.pipelining's ScheduleZBVZeroBubble, whose construction this follows step for step): two
  chunks per rank, rank r holding stages r and 2p - 1 - r; 1F1B's peak activation memory and, for
  T_F = T_I = T_W, no bubble inside each rank's span.
"""
from __future__ import annotations

from collections import defaultdict

from .actions import BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Action, Schedule


def interleaved_zero_bubble(pp: int, microbatches: int, chunks: int = 1) -> Schedule:
    """torch's ScheduleInterleavedZeroBubble (ZB-H1 with one chunk): see the module docstring."""
    rounds = max(1, microbatches // pp)
    per_round = microbatches // rounds
    total = microbatches * chunks
    out = []
    for rank in range(pp):
        warmup = min((chunks - 1) * per_round + (pp - 1 - rank), total)

        def forward_chunk(step: int) -> int:
            return (step // per_round) % chunks

        def backward_chunk(step: int, warmup=warmup) -> int:
            return chunks - 1 - ((step - warmup) // per_round) % chunks
        out.append(_one_f_one_b_zero_bubble(warmup, total, forward_chunk, backward_chunk, delay=rank))
    return out


def _one_f_one_b_zero_bubble(warmup: int, total: int, forward_chunk, backward_chunk, delay: int) -> list[Action]:
    """torch's _get_1f1b_rank_ops with enable_zero_bubble: warm-up forwards, then a forward and an I per step (I
    only, in the cool-down), the W of the k-th I after the (k + delay)-th step, the remaining W's last."""
    counts: dict[tuple[str, int], int] = defaultdict(int)

    def act(phase: str, chunk: int) -> Action:
        a = Action(phase, counts[(phase, chunk)], chunk)
        counts[(phase, chunk)] += 1
        return a
    acts, inputs = [], []
    for step in range(total + warmup):
        if step < total:
            acts.append(act(FORWARD, forward_chunk(step)))
        if step >= warmup:
            inputs.append(backward_chunk(step))
            acts.append(act(BACKWARD_INPUT, inputs[-1]))
            if step - warmup >= delay:
                acts.append(act(BACKWARD_WEIGHT, inputs[counts[("W", -1)]]))
                counts[("W", -1)] += 1
    for chunk in inputs[counts[("W", -1)]:]:
        acts.append(act(BACKWARD_WEIGHT, chunk))
    return acts


def zb_h1(pp: int, microbatches: int) -> Schedule:
    """ZB-H1 (Qi et al. 2023): the interleaved zero-bubble schedule with one chunk per rank."""
    return interleaved_zero_bubble(pp, microbatches, 1)


def zb_h2(pp: int, microbatches: int) -> Schedule:
    """ZB-H2 (Qi et al. 2023): see the module docstring."""
    limit = 2 * pp - 1
    fwd, inp, wgt = [0] * pp, [0] * pp, [0] * pp  # next forward, I and W of each rank
    f_end: list[dict[int, int]] = [{} for _ in range(pp)]  # microbatch -> end of its forward on each rank
    i_end: list[dict[int, int]] = [{} for _ in range(pp)]
    free = [0] * pp
    out: Schedule = [[] for _ in range(pp)]
    t = 0
    while any(wgt[r] < microbatches for r in range(pp)):
        if t > 6 * (microbatches + pp):
            raise AssertionError("internal: the ZB-H2 construction made no progress")
        for r in range(pp):
            if free[r] > t:
                continue
            m = inp[r]
            grad = i_end[r + 1].get(m) if r + 1 < pp else f_end[r].get(m)
            act = None
            if m < fwd[r] and grad is not None and grad <= t:
                act, i_end[r][m] = Action(BACKWARD_INPUT, m), t + 1
                inp[r] += 1
            elif fwd[r] < microbatches and fwd[r] - wgt[r] < limit and (r == 0 or f_end[r - 1].get(fwd[r], t + 1) <= t):
                act, f_end[r][fwd[r]] = Action(FORWARD, fwd[r]), t + 1
                fwd[r] += 1
            elif wgt[r] < inp[r]:
                act = Action(BACKWARD_WEIGHT, wgt[r])
                wgt[r] += 1
            if act is not None:
                out[r].append(act)
                free[r] = t + 1
        t += 1
    return out


def zbv(pp: int, microbatches: int) -> Schedule:
    """ZB-V, as torch.distributed.pipelining's ScheduleZBVZeroBubble builds it (module docstring): warm-up forwards
    of chunk 0, then chunk 1's, then F I W of chunk 1; a steady F I W of chunk 0 then of chunk 1; a cool-down of I's
    and W's. With fewer than 2p - 1 micro-batches it is built for 2p - 1 and the missing ones dropped."""
    n = max(2 * pp - 1, microbatches)
    return [[a for a in _zbv_rank(pp, rank, n) if a.microbatch < microbatches] for rank in range(pp)]


def _zbv_rank(pp: int, rank: int, n: int) -> list[Action]:
    count: dict[tuple[str, int], int] = defaultdict(int)
    acts: list[Action] = []

    def add(phase: str, chunk: int) -> None:
        acts.append(Action(phase, count[(phase, chunk)], chunk))
        count[(phase, chunk)] += 1
    for _ in range(2 * (pp - rank) - 1):
        add(FORWARD, 0)
    for _ in range(rank):
        add(FORWARD, 1)
        add(FORWARD, 0)
    for _ in range(pp - rank):
        add(FORWARD, 1)
        add(BACKWARD_INPUT, 1)
        add(BACKWARD_WEIGHT, 1)
    while count[(FORWARD, 1)] < count[(FORWARD, 0)] or count[(FORWARD, 0)] < n:
        if count[(FORWARD, 0)] < n:
            add(FORWARD, 0)
        add(BACKWARD_INPUT, 0)
        add(BACKWARD_WEIGHT, 0)
        add(FORWARD, 1)
        add(BACKWARD_INPUT, 1)
        add(BACKWARD_WEIGHT, 1)
    for _ in range(rank):
        add(BACKWARD_INPUT, 0)
        add(BACKWARD_INPUT, 1)
    for _ in range(pp - rank):
        add(BACKWARD_INPUT, 0)
        add(BACKWARD_WEIGHT, 0)
    while count[(BACKWARD_WEIGHT, 1)] < count[(BACKWARD_INPUT, 1)]:
        add(BACKWARD_WEIGHT, 1)
    while count[(BACKWARD_WEIGHT, 0)] < count[(BACKWARD_INPUT, 0)]:
        add(BACKWARD_WEIGHT, 0)
    return acts


__all__ = ["interleaved_zero_bubble", "zb_h1", "zb_h2", "zbv"]
