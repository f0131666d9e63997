"""A pipeline schedule under its data dependencies: the checks that it is well formed and cannot deadlock, its
makespan, bubble and activation memory. The same checks guard numeric training and the step model (layout.py
checks the schedule of every layout built to run; the plan's screening reads only their memory, unchecked).

- `check`: each (micro-batch, chunk) a rank runs has a forward and then either a B or an I followed by a W, each
  once; a micro-batch that enters a chunk goes through every stage of its path; and between each pair of ranks the
  messages of each kind (activations or gradients, one p2p tag) are sent and received in the same order, since
  point-to-point messages between two ranks on one tag are matched in order (NCCL, gloo).
- `timeline`: each rank runs its actions in order, each as soon as its inputs are there (a forward needs the
  previous stage's forward, a B or I the next stage's B or I and its own forward, a W its own I); data takes `comm`
  seconds between ranks (none at a V-shape's turn, which stays on one rank). An order that can never finish is a
  deadlock, reported with what each rank waits for.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ...errors import SimcommError
from .actions import (BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, INPUT_GRADIENT, Action, Overlap,
                      Placement, Schedule, computations)

ACTIVATION, GRADIENT = "activations", "gradients"


def default_placement(sched: Schedule) -> Placement:
    """Megatron's placement for a schedule's number of chunks."""
    chunks = 1 + max((a.chunk for acts in sched for a in computations(acts)), default=0)
    return Placement("loop", len(sched), chunks)


# ---- the static checks -----------------------------------------------------------------------------------------
def check(sched: Schedule, placement: Placement | None = None) -> None:
    """Raise a SimcommError naming the rank and actions if the schedule is not well formed (module docstring)."""
    placement = placement or default_placement(sched)
    ran = [_check_rank(r, acts) for r, acts in enumerate(sched)]
    for r, held in enumerate(ran):
        sides: dict = {}
        for (m, c), phases in held.items():
            if c not in sides:
                sides[c] = (("previous", placement.prev(r, c)), ("next", placement.next(r, c)))
            for side, where in sides[c]:
                if where is not None and (m, where[1]) not in ran[where[0]]:
                    raise SimcommError(f"the pipeline schedule is incomplete: micro-batch {m} runs on rank {r} "
                                       f"chunk {c} but not on the {side} stage (rank {where[0]} chunk {where[1]})")
    _check_channels(sched, placement)


def _check_rank(rank: int, acts) -> dict[tuple[int, int], list[str]]:
    """{(micro-batch, chunk): phases in order} of one rank, each a valid sequence."""
    held: dict[tuple[int, int], list[str]] = {}
    for a in computations(acts):
        phases = held.get((a.microbatch, a.chunk))
        if phases is None and a.phase == FORWARD:  # the common case first
            held[(a.microbatch, a.chunk)] = [FORWARD]
            continue
        if phases is None:
            phases = held[(a.microbatch, a.chunk)] = []
        n = len(phases)
        if not (a.phase == FORWARD if n == 0 else a.phase in INPUT_GRADIENT if n == 1 else
                n == 2 and a.phase == BACKWARD_WEIGHT and phases[1] == BACKWARD_INPUT):
            before = " ".join(p + str(a.microbatch) for p in phases) or "nothing"
            raise SimcommError(f"the pipeline schedule runs {a} on rank {rank} after {before} of that micro-batch and "
                               "chunk: each needs a forward, then a B, or an I and then a W")
        phases.append(a.phase)
    for (m, c), phases in held.items():
        if phases[-1] not in (BACKWARD, BACKWARD_WEIGHT):
            raise SimcommError(f"the pipeline schedule never finishes micro-batch {m} chunk {c} on rank {rank}: it "
                               f"runs only {' '.join(phases)}")
    return held


def _check_channels(sched: Schedule, placement: Placement) -> None:
    """Between two ranks, each kind of message (one p2p tag) is received in the order it is sent."""
    sent: dict[tuple, list[tuple[int, int]]] = {}  # (src, dst, kind) -> (micro-batch, chunk it is for), in order
    received: dict[tuple, list[tuple[int, int]]] = {}
    for r, acts in enumerate(sched):
        # (phase, chunk) -> its transfers, as (the channel's list, the chunk each is for): a schedule repeats a few
        moves: dict[tuple[str, int], tuple] = {}
        for a in computations(acts):
            got = moves.get((a.phase, a.chunk))
            if got is None:
                got = moves[(a.phase, a.chunk)] = tuple(
                    (sent.setdefault((r, peer[0], kind), []), peer[1]) if outgoing else
                    (received.setdefault((peer[0], r, kind), []), a.chunk)
                    for kind, peer, outgoing in _transfers(a, r, placement))
            for channel, chunk in got:
                channel.append((a.microbatch, chunk))
    for key in sorted(set(sent) | set(received)):
        s, got = sent.get(key, []), received.get(key, [])
        if s != got:
            src, dst, kind = key
            name = lambda x: f"{x[0]}" + (f".{x[1]}" if x[1] else "")  # noqa: E731
            raise SimcommError(f"the pipeline schedule's sends and receives do not match: rank {src} sends the "
                               f"{kind} of micro-batches {', '.join(map(name, s))} to rank {dst}, which receives "
                               f"them in the order {', '.join(map(name, got))} (micro-batch.chunk it is for)")


def _transfers(a: Action, rank: int, placement: Placement):
    """(kind, (rank, chunk) of the peer, outgoing) of each message action `a` sends or receives across ranks."""
    if a.phase == FORWARD:
        moves = ((ACTIVATION, placement.prev(rank, a.chunk), False), (ACTIVATION, placement.next(rank, a.chunk), True))
    elif a.phase in INPUT_GRADIENT:
        moves = ((GRADIENT, placement.next(rank, a.chunk), False), (GRADIENT, placement.prev(rank, a.chunk), True))
    else:
        moves = ()
    return [(k, peer, out) for k, peer, out in moves if peer is not None and peer[0] != rank]


# ---- evaluating an order -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timed:
    """An action (or overlapped pair) with the times it ran in `timeline`."""

    rank: int
    action: Action | Overlap
    start: float
    end: float


def costs(f: float = 1.0, i: float = 1.0, w: float = 1.0,
          overlap: Callable[[float, float], float] | None = None) -> Callable[[int, Action | Overlap], float]:
    """duration(rank, action) for uniform stages: a forward f, an input gradient i, a weight gradient w, a full
    backward i + w, an overlapped pair overlap(f, i + w) (default: their sum, as with nothing to hide)."""
    def duration(_rank: int, a) -> float:
        if isinstance(a, Overlap):
            return overlap(f, i + w) if overlap else f + i + w
        return {FORWARD: f, BACKWARD_INPUT: i, BACKWARD_WEIGHT: w, BACKWARD: i + w}[a.phase]
    return duration


def timeline(sched: Schedule, duration: Callable[[int, Action | Overlap], float] | None = None,
             comm: float = 0.0, placement: Placement | None = None) -> list[list[Timed]]:
    """Run each rank's actions in order under the data dependencies (module docstring). duration(rank, action)
    defaults to costs(): 1 for F, I and W, 2 for B. Raises a SimcommError naming what each rank waits for if the order
    can never finish (a deadlock)."""
    placement = placement or default_placement(sched)
    duration = duration or costs()
    pp = len(sched)
    done: dict[tuple, float] = {}  # (kind, microbatch, rank, chunk) -> end time
    free, pos = [0.0] * pp, [0] * pp
    waiting: list = [None] * pp  # the needs of the action each rank is stuck at (worked out once)
    out: list[list[Timed]] = [[] for _ in range(pp)]
    while any(pos[r] < len(sched[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            while pos[r] < len(sched[r]):
                a = sched[r][pos[r]]
                needs = waiting[r]
                if needs is None:
                    needs = [n for x in (a.parts if isinstance(a, Overlap) else (a,)) for n in _needs(x, r, placement)]
                if any(n not in done for n in needs):
                    waiting[r] = needs
                    break
                waiting[r] = None
                ready = max([free[r]] + [done[n] + (comm if n[2] != r else 0.0) for n in needs])
                end = ready + duration(r, a)
                for x in a.parts if isinstance(a, Overlap) else (a,):
                    done[_produces(x, r)] = end
                out[r].append(Timed(r, a, ready, end))
                free[r] = end
                pos[r] += 1
                progressed = True
        if not progressed:
            waits = "; ".join(f"rank {r} waits to run {sched[r][pos[r]]}" for r in range(pp) if pos[r] < len(sched[r]))
            raise SimcommError(f"the pipeline schedule deadlocks: {waits}")
    return out


def _produces(a: Action, rank: int) -> tuple:
    kind = "G" if a.phase in INPUT_GRADIENT else a.phase
    return kind, a.microbatch, rank, a.chunk


def _needs(a: Action, rank: int, placement: Placement) -> list[tuple]:
    if a.phase == FORWARD:
        prev = placement.prev(rank, a.chunk)
        return [(FORWARD, a.microbatch, *prev)] if prev else []
    if a.phase == BACKWARD_WEIGHT:
        return [("G", a.microbatch, rank, a.chunk)]
    nxt = placement.next(rank, a.chunk)
    return [(FORWARD, a.microbatch, rank, a.chunk)] + ([("G", a.microbatch, *nxt)] if nxt else [])


def makespan(times: list[list[Timed]]) -> float:
    return max((t.end for ts in times for t in ts), default=0.0)


def idle(times: list[list[Timed]]) -> list[float]:
    """Per rank, the time of the makespan it runs nothing: its bubble."""
    span = makespan(times)
    return [span - sum(t.end - t.start for t in ts) for ts in times]


def holes(times: list[list[Timed]]) -> list[float]:
    """Per rank, the idle time between its first start and its last end (the bubble inside its own span, which
    Qi et al.'s ZB-H2 counts: the skew before and after it is filled by the neighbouring steps when the optimizer
    does not synchronise the stages)."""
    return [(ts[-1].end - ts[0].start) - sum(t.end - t.start for t in ts) if ts else 0.0 for ts in times]


def bubble_fraction(times: list[list[Timed]]) -> float:
    """Share of the makespan each rank is idle, averaged over ranks."""
    span = makespan(times)
    return sum(idle(times)) / (span * len(times)) if span > 0 else 0.0


# ---- activation memory -----------------------------------------------------------------------------------------
def peak_in_flight(acts: Iterable[Action | Overlap]) -> int:
    """Most microbatch-chunks whose forward has run but whose weight gradient has not (a full backward computes it):
    the activations a rank holds, in Qi et al.'s count."""
    live, peak = 0, 0
    for a in computations(acts):
        live += {FORWARD: 1, BACKWARD: -1, BACKWARD_WEIGHT: -1}.get(a.phase, 0)
        peak = max(peak, live)
    return peak


def held_at_peaks(acts: list[Action | Overlap], chunks: int) -> tuple[tuple[int, ...], ...]:
    """Wherever a rank's activations can peak (after a forward followed by anything else, or ending the list): per
    chunk the microbatches holding all their activations (forward run, backward not), then per chunk those holding
    only what their W needs (I run, W not), each distinct state once, in order of first occurrence."""
    flat = list(computations(acts))
    full, weight, seen = [0] * chunks, [0] * chunks, {}
    for i, a in enumerate(flat):
        if a.phase == FORWARD:
            full[a.chunk] += 1
            if i + 1 == len(flat) or flat[i + 1].phase != FORWARD:
                seen.setdefault(tuple(full) + tuple(weight), None)
        elif a.phase == BACKWARD_INPUT:
            full[a.chunk] -= 1
            weight[a.chunk] += 1
        elif a.phase == BACKWARD_WEIGHT:
            weight[a.chunk] -= 1
        else:
            full[a.chunk] -= 1
    return tuple(seen)


__all__ = ["Timed", "bubble_fraction", "check", "costs", "default_placement", "held_at_peaks", "holes", "idle",
           "makespan", "peak_in_flight", "timeline"]
