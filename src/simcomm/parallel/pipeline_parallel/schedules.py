"""Pipeline schedules as plain functions: the order in which each pipeline rank runs its passes (actions.py), by the
names torch.distributed.pipelining and Megatron-LM use. The same lists drive numeric training (rank programs on
real data) and the step cost model; timeline.py checks them and evaluates them under their dependencies.

- GPipe: every forward, then every backward.
- 1F1B (PipeDream-Flush, Megatron's non-interleaved schedule): rank r warms up with min(p - r - 1, m) forwards,
  then alternates one forward and one backward, then cools down with the remaining backwards.
- Interleaved 1F1B (Megatron's virtual pipeline): each rank holds v model chunks (virtual stage c * p + r); the
  forward order walks groups of `group_size` microbatches (microbatch_group_size_per_vp_stage, default p: Llama 3's
  flexible micro-batch count per round is another group size) through chunks 0..v-1, backwards the chunks in
  reverse; warm-up is 2(p - r - 1) + (v - 1) * group_size forwards, capped at m * v (all of them when m == p), as
  in Megatron-LM's schedules.py, which also requires microbatches % group_size to be 0 or >= p.
- Looped BFS (torch's ScheduleLoopedBFS, Lamy-Poirier 2022): each chunk's forwards for every micro-batch, chunk by
  chunk; then the backwards, chunks in reverse and micro-batches in reverse.
- The zero-bubble schedules (zero_bubble.py): ZB-H1, ZB-H2, torch's interleaved zero bubble, ZB-V; DualPipe and
  DualPipeV (dualpipe.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...errors import SimcommError
from .actions import BACKWARD, FORWARD, Action, Placement, Schedule
from .dualpipe import dualpipe, dualpipev
from .timeline import check as check_schedule
from .zero_bubble import interleaved_zero_bubble, zb_h1, zb_h2, zbv


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
    fwd = [Action(FORWARD, m) for m in range(microbatches)]
    bwd = [Action(BACKWARD, m) for m in range(microbatches)]
    return [_one_f_one_b(fwd, bwd, min(pp - rank - 1, microbatches)) for rank in range(pp)]


def _one_f_one_b(fwd: list[Action], bwd: list[Action], warmup: int) -> list[Action]:
    """One rank's 1F1B order of its forwards and backwards (each in order): `warmup` forwards, then one forward
    and one backward in turn, then the backwards left. The ranks share the actions (they are immutable)."""
    steady = len(fwd) - warmup
    pairs = [None] * (2 * steady)
    pairs[0::2], pairs[1::2] = fwd[warmup:], bwd[:steady]
    return fwd[:warmup] + pairs + bwd[steady:]


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
    if not pp <= group_size <= microbatches:  # a smaller group deadlocks with Megatron's warm-up
        raise SimcommError(f"microbatch_group_size_per_vp_stage ({group_size}) must lie between "
                           f"pipeline_model_parallel_size ({pp}) and the number of microbatches ({microbatches}), as "
                           "Megatron-LM requires of the interleaved schedule")
    table = interleaved_order(microbatches, chunks, group_size)
    total = microbatches * chunks
    fwd = [Action(FORWARD, m, c) for m, c in table]
    bwd = [Action(BACKWARD, m, chunks - 1 - c) for m, c in table]
    return [_one_f_one_b(fwd, bwd, total if microbatches == pp else
                         min(2 * (pp - rank - 1) + (chunks - 1) * group_size, total)) for rank in range(pp)]


def looped_bfs(pp: int, microbatches: int, chunks: int = 1) -> Schedule:
    """torch's ScheduleLoopedBFS: breadth first over the chunks (module docstring)."""
    _check(pp, microbatches, chunks)
    fwd = [Action(FORWARD, m, c) for c in range(chunks) for m in range(microbatches)]
    bwd = [Action(BACKWARD, m, c) for c in reversed(range(chunks)) for m in reversed(range(microbatches))]
    return [fwd + bwd for _ in range(pp)]


# ---- the registry: names, placements, what each needs ----------------------------------------------------------
@dataclass(frozen=True)
class ScheduleSpec:
    """A schedule by its canonical name: how to build it, where its stages sit, what it needs."""

    name: str
    build: Callable[..., Schedule]  # (pp, microbatches, chunks, group_size) -> Schedule
    torch_name: str | None  # torchtitan's pipeline_parallel_schedule / torch's get_schedule_class name
    chunks: str = "one"  # one | many (>= 2) | any (>= 1) | two (exactly: V shape and DualPipe's two copies)
    style: str = "loop"  # the Placement style
    min_pp: int = 1
    even_pp: bool = False
    min_microbatches: Callable[[int], int] = lambda pp: 1
    even_microbatches: bool = False
    splits_backward: bool = False  # has I and W passes
    source: str = ""
    label: str = ""  # how a table names it (beside a column of virtual stages)
    short: str = ""  # how a one-line layout names it, with "-v<chunks>" where the chunks vary

    def short_name(self, chunks: int) -> str:
        return f"{self.short}-v{chunks}" if self.chunks == "any" else self.short

    def placement(self, pp: int, chunks: int) -> Placement:
        return Placement(self.style, pp, chunks)


def _fixed(fn):
    return lambda pp, m, chunks, group: fn(pp, m)


def _rounds(pp: int, m: int, chunks: int, _group) -> Schedule:
    rounds = max(1, m // pp)
    if m % rounds:
        raise SimcommError(f"interleaved zero bubble (torch's ScheduleInterleavedZeroBubble) needs the number of "
                           f"microbatches ({m}) to be a multiple of its number of rounds, max(1, m // p) = {rounds}")
    return interleaved_zero_bubble(pp, m, chunks)


SPECS = (
    ScheduleSpec("gpipe", _fixed(gpipe), "GPipe", label="GPipe", short="GPipe", source="Huang et al. 2019"),
    ScheduleSpec("1f1b", _fixed(one_f_one_b), "1F1B", label="1F1B", short="1F1B",
                 source="Narayanan et al. 2021, Megatron-LM"),
    ScheduleSpec("interleaved_1f1b", lambda pp, m, c, g: interleaved_1f1b(pp, m, c, g), "Interleaved1F1B",
                 label="interleaved 1F1B", short="1F1B", chunks="any", source="Narayanan et al. 2021, Megatron-LM"),
    ScheduleSpec("looped_bfs", lambda pp, m, c, g: looped_bfs(pp, m, c), "LoopedBFS", label="looped BFS",
                 short="LoopedBFS", chunks="any", source="Lamy-Poirier 2022, torch.distributed.pipelining"),
    ScheduleSpec("zb_h1", _fixed(zb_h1), None, label="ZB-H1", short="ZB-H1", splits_backward=True,
                 source="Qi et al. 2023"),
    ScheduleSpec("zb_h2", _fixed(zb_h2), None, label="ZB-H2", short="ZB-H2", splits_backward=True,
                 source="Qi et al. 2023"),
    ScheduleSpec("interleaved_zb", _rounds, "InterleavedZeroBubble", label="interleaved ZB", short="ZB",
                 chunks="any", splits_backward=True, source="Qi et al. 2023 (ZB1P), torch.distributed.pipelining"),
    ScheduleSpec("zbv", _fixed(zbv), "ZBVZeroBubble", label="ZB-V", short="ZB-V", chunks="two", style="v",
                 splits_backward=True, source="Qi et al. 2024, torch.distributed.pipelining"),
    ScheduleSpec("dualpipe", _fixed(dualpipe), "DualPipe", label="DualPipe", short="DualPipe", chunks="two",
                 style="dual", min_pp=2, even_pp=True, min_microbatches=lambda pp: 2 * pp, even_microbatches=True,
                 splits_backward=True, source="DeepSeek-V3 2024, deepseek-ai/DualPipe"),
    ScheduleSpec("dualpipev", _fixed(dualpipev), "DualPipeV", label="DualPipeV", short="DualPipeV", chunks="two",
                 style="v", min_microbatches=lambda pp: 2 * pp, splits_backward=True,
                 source="deepseek-ai/DualPipe, torch.distributed.pipelining"),
)
SCHEDULES: dict[str, ScheduleSpec] = {s.name: s for s in SPECS}
ALIASES = {**{s.torch_name.lower(): s.name for s in SPECS if s.torch_name}, "interleaved": "interleaved_1f1b",
           "zbh1": "zb_h1", "zbh2": "zb_h2", "zb_v": "zbv", "interleaved_zero_bubble": "interleaved_zb",
           "dual_pipe": "dualpipe", "dual_pipe_v": "dualpipev"}


def canonical(name: str) -> str:
    """The canonical name of a schedule given in either form (zb_h1, ZBVZeroBubble, Interleaved1F1B, ...)."""
    key = str(name).strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in SCHEDULES:
        known = ", ".join(f"{s.name}" + (f" ({s.torch_name})" if s.torch_name else "") for s in SPECS)
        raise SimcommError(f"unknown pipeline schedule {name!r}; expected one of {known}")
    return key


def schedule(name: str, pp: int, microbatches: int, chunks: int = 1, group_size: int | None = None,
             check: bool = True) -> Schedule:
    """A schedule by name (either form), checked (timeline.check) unless `check` is False (a caller that checks
    it itself); SimcommError if the sizes cannot run it."""
    spec = SCHEDULES[canonical(name)]
    _check(pp, microbatches, chunks)
    _fits(spec, pp, microbatches, chunks)
    sched = spec.build(pp, microbatches, chunks, group_size)
    if check:
        check_schedule(sched, spec.placement(pp, chunks))
    return sched


def _fits(spec: ScheduleSpec, pp: int, m: int, chunks: int) -> None:
    rules = {"one": (chunks == 1, "runs one model chunk per rank"), "many": (chunks >= 2, "needs model chunks "
             "(virtual pipeline stages)"), "two": (chunks == 2, "runs exactly two model chunks per rank"),
             "any": (True, "")}
    ok, why = rules[spec.chunks]
    if not ok:
        fit = ", ".join(s.name for s in SPECS if rules[s.chunks][0] if s.chunks != "one")
        raise SimcommError(f"schedule {spec.name} {why}; got {chunks} model chunks per rank, which need one of "
                           f"{fit or 'the schedules with virtual stages'}")
    if pp < spec.min_pp or spec.even_pp and pp % 2:
        raise SimcommError(f"schedule {spec.name} needs {'an even ' if spec.even_pp else ''}"
                           f"pipeline_model_parallel_size of at least {spec.min_pp}, got {pp}")
    least = spec.min_microbatches(pp)
    if m < least or spec.even_microbatches and m % 2:
        raise SimcommError(f"schedule {spec.name} needs {'an even number' if spec.even_microbatches else 'a number'} "
                           f"of microbatches of at least {least} with pipeline_model_parallel_size {pp}, got {m}")


__all__ = ["ALIASES", "SCHEDULES", "SPECS", "ScheduleSpec", "canonical", "gpipe", "interleaved_1f1b",
           "interleaved_order", "looped_bfs", "one_f_one_b", "schedule"]
