"""Pipeline schedules as plain functions: the order in which each pipeline rank runs forward and backward passes.

The same functions drive numeric training (rank programs on real data) and the step cost model. Each returns, per
pipeline rank, a list of Actions; `timeline` evaluates an order under its data dependencies, which checks that it
cannot deadlock and gives its makespan and bubble.

- GPipe: every forward, then every backward.
- 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): rank r warms up with min(p - r - 1, m) forwards,
  then alternates one forward and one backward, then cools down with the remaining backwards.
- Interleaved 1F1B (Megatron's virtual pipeline): each rank holds v model chunks (virtual stage c * p + r); the
  forward order walks groups of `group_size` microbatches (default p) through chunks 0..v-1, backwards the chunks
  in reverse; warm-up is 2(p - r - 1) + (v - 1) * group_size forwards, capped at m * v (all of them when m == p),
  as in Megatron-LM's schedules.py, which also requires microbatches % group_size to be 0 or >= p.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

from ...errors import SimcommError

FORWARD, BACKWARD = "F", "B"


class Action(NamedTuple):
    """One pass of one microbatch through one model chunk on one pipeline rank."""

    phase: str  # "F" or "B"
    microbatch: int
    chunk: int = 0  # model chunk (virtual stage chunk * p + rank); 0 without interleaving

    def __str__(self) -> str:
        return f"{self.phase}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


Schedule = list[list[Action]]  # per pipeline rank, in execution order


def _check(pp: int, microbatches: int, chunks: int = 1) -> None:
    for name, v in (("pipeline_model_parallel_size", pp), ("number of microbatches", microbatches),
                    ("model chunks per rank", chunks)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SimcommError(f"{name} must be a whole number >= 1, got {v!r}")


def gpipe(pp: int, microbatches: int) -> Schedule:
    """All forwards, then all backwards, on every rank."""
    _check(pp, microbatches)
    one = [Action(FORWARD, m) for m in range(microbatches)] + [Action(BACKWARD, m) for m in range(microbatches)]
    return [list(one) for _ in range(pp)]


def one_f_one_b(pp: int, microbatches: int) -> Schedule:
    """Megatron's non-interleaved 1F1B: warm-up forwards, steady one-forward-one-backward, cool-down backwards."""
    _check(pp, microbatches)
    out = []
    for rank in range(pp):
        warmup = min(pp - rank - 1, microbatches)
        acts = [Action(FORWARD, m) for m in range(warmup)]
        for i in range(microbatches - warmup):
            acts += [Action(FORWARD, warmup + i), Action(BACKWARD, i)]
        acts += [Action(BACKWARD, m) for m in range(microbatches - warmup, microbatches)]
        out.append(acts)
    return out


def interleaved_order(microbatches: int, chunks: int, group_size: int) -> list[tuple[int, int]]:
    """(microbatch, chunk) of the k-th forward on every rank: groups of `group_size` microbatches through each
    chunk in turn (Megatron's schedule table); the k-th backward uses the same microbatch and chunk v - 1 - c."""
    table = []
    for first in range(0, microbatches, group_size):
        last = microbatches if first + group_size >= microbatches else first + group_size
        table += [(m, c) for c in range(chunks) for m in range(first, last)]
    return table


def interleaved_1f1b(pp: int, microbatches: int, chunks: int, group_size: int | None = None) -> Schedule:
    """Megatron's interleaved 1F1B with `chunks` model chunks per rank (num_layers_per_virtual_pipeline_stage
    gives chunks = layers per rank / that number); group_size is microbatch_group_size_per_vp_stage (default pp)."""
    _check(pp, microbatches, chunks)
    group_size = pp if group_size is None else group_size
    if chunks == 1:
        return one_f_one_b(pp, microbatches)
    last_group = microbatches % group_size
    if 0 < last_group < pp:  # Megatron-LM refuses these too: the last group cannot fill the pipeline
        raise SimcommError(f"interleaved 1F1B needs the number of microbatches ({microbatches}) to be a multiple of "
                           f"the microbatch group size ({group_size}), or to leave a last group of at least "
                           f"pipeline_model_parallel_size ({pp}); it leaves {last_group}, which would deadlock the "
                           "pipeline")
    table = interleaved_order(microbatches, chunks, group_size)
    total = microbatches * chunks
    out = []
    for rank in range(pp):
        if microbatches == pp:
            warmup = total
        else:
            warmup = min(2 * (pp - rank - 1) + (chunks - 1) * group_size, total)
        fwd = [Action(FORWARD, m, c) for m, c in table]
        bwd = [Action(BACKWARD, m, chunks - 1 - c) for m, c in table]
        acts = fwd[:warmup]
        for i in range(total - warmup):
            acts += [fwd[warmup + i], bwd[i]]
        acts += bwd[total - warmup:]
        out.append(acts)
    return out


SCHEDULES: dict[str, Callable[..., Schedule]] = {"gpipe": gpipe, "1f1b": one_f_one_b,
                                                  "interleaved_1f1b": interleaved_1f1b}


def schedule(name: str, pp: int, microbatches: int, chunks: int = 1) -> Schedule:
    """A schedule by name: 'gpipe', '1f1b' or 'interleaved_1f1b' (torchtitan also says GPipe, 1F1B,
    Interleaved1F1B)."""
    key = name.strip().lower().replace("-", "_")
    key = {"interleaved1f1b": "interleaved_1f1b", "interleaved": "interleaved_1f1b"}.get(key, key)
    if key not in SCHEDULES:
        raise SimcommError(f"unknown pipeline schedule {name!r}; expected one of {', '.join(SCHEDULES)}")
    if key == "interleaved_1f1b":
        return interleaved_1f1b(pp, microbatches, chunks)
    if chunks != 1:
        raise SimcommError(f"schedule {key} runs one model chunk per rank; {chunks} chunks need interleaved_1f1b")
    return SCHEDULES[key](pp, microbatches)


# ---- evaluating an order under its dependencies ---------------------------------------------------------------
@dataclass(frozen=True)
class Timed:
    """An action with the times it ran in `timeline`."""

    rank: int
    action: Action
    start: float
    end: float


def virtual_stage(rank: int, chunk: int, pp: int) -> int:
    """The position in the whole model of chunk `chunk` on pipeline rank `rank`."""
    return chunk * pp + rank


def timeline(sched: Schedule, duration: Callable[[int, Action], float] | None = None,
             comm: float = 0.0) -> list[list[Timed]]:
    """Run each rank's actions in order under the data dependencies: F(m) of virtual stage s needs F(m) of s - 1,
    B(m) of s needs B(m) of s + 1 and F(m) of s itself; data takes `comm` seconds between stages. duration(rank,
    action) defaults to 1 for F and 2 for B. Raises a SimcommError naming what each rank waits for if the order
    can never finish (a deadlock)."""
    pp = len(sched)
    duration = duration or (lambda _r, a: 1.0 if a.phase == FORWARD else 2.0)
    chunks = 1 + max((a.chunk for acts in sched for a in acts), default=0)
    last_stage = pp * chunks - 1
    done: dict[tuple[str, int, int], float] = {}  # (phase, microbatch, virtual stage) -> end time
    free = [0.0] * pp
    pos = [0] * pp
    out: list[list[Timed]] = [[] for _ in range(pp)]
    while any(pos[r] < len(sched[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            while pos[r] < len(sched[r]):
                a = sched[r][pos[r]]
                s = virtual_stage(r, a.chunk, pp)
                needs = _needs(a, s, last_stage)
                if any(n not in done for n in needs):
                    break
                ready = max([free[r]] + [done[n] + (comm if n[2] != s else 0.0) for n in needs])
                end = ready + duration(r, a)
                done[(a.phase, a.microbatch, s)] = end
                out[r].append(Timed(r, a, ready, end))
                free[r] = end
                pos[r] += 1
                progressed = True
        if not progressed:
            waits = "; ".join(f"rank {r} waits to run {sched[r][pos[r]]}" for r in range(pp) if pos[r] < len(sched[r]))
            raise SimcommError(f"the pipeline schedule deadlocks: {waits}")
    return out


def _needs(a: Action, s: int, last_stage: int) -> list[tuple[str, int, int]]:
    if a.phase == FORWARD:
        return [(FORWARD, a.microbatch, s - 1)] if s > 0 else []
    return [(FORWARD, a.microbatch, s)] + ([(BACKWARD, a.microbatch, s + 1)] if s < last_stage else [])


def makespan(times: list[list[Timed]]) -> float:
    return max((t.end for ts in times for t in ts), default=0.0)


def bubble_fraction(times: list[list[Timed]]) -> float:
    """Share of the makespan each rank is idle, averaged over ranks."""
    span = makespan(times)
    if span <= 0:
        return 0.0
    busy = [sum(t.end - t.start for t in ts) for ts in times]
    return sum(1 - b / span for b in busy) / len(times)


def peak_in_flight(acts: Iterable[Action]) -> int:
    """Most microbatch-chunks whose forward has run but whose backward has not: the activations a rank holds."""
    live, peak = 0, 0
    for a in acts:
        live += 1 if a.phase == FORWARD else -1
        peak = max(peak, live)
    return peak
