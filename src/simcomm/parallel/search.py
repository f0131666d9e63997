"""Layout search: every valid (tp, pp, cp, dp, micro-batch, schedule, virtual stages, ZeRO stage, recomputation; for
a mixture of experts also ep and etp) for a model, a cluster and a global batch; the memory-feasible ones ranked by
predicted step time.

Passes, all deterministic (the result does not depend on the number of workers):
1. enumerate: every combination Megatron-LM's rules allow (build_layout accepts it): tp divides the GPUs of a node
   and the heads; cp (by default) every size that divides the GPUs left and splits the sequence into 2 cp equal
   chunks (causal load balancing) that sequence parallelism can split again by tp; pp divides the layers;
   dp = GPUs / (tp cp pp) divides the batch with the micro-batch; schedules 1F1B, GPipe, interleaved 1F1B, looped
   BFS and interleaved zero bubble with every v that divides the stage's layers, ZB-H1, ZB-H2, ZB-V, DualPipeV and
   DualPipe where their sizes allow; ZeRO stages 0-3 (1-3 need dp x cp > 1; not with experts); of those, the ones
   the chosen framework runs (frameworks.py; by default every framework's but ZeRO-3 with pipeline parallelism).
   MoE models: ep every divisor of the experts that divides a stage's GPUs, etp 1 or tp (the expert grid folded
   onto the stage). Sequence parallelism is on whenever tp > 1 (same traffic as all-reduce, less memory); gradient
   reduction overlaps the backward, and with ZeRO 1-2 parameter gathers overlap the forward. The world is the
   config's world_size (every GPU of the cluster when 0); a step past layout's MAX_PIPELINE_PASSES or
   MAX_LAYER_PASSES is refused (global_batch_size).
2. screen, every layout: peak memory per GPU (model/memory.py) and, for the ones that fit, a compute bound of the
   step time: the schedule's critical path with compute-only passes (the kernels' seconds, no communication),
   max over ranks r of (the first forward and last backward of ranks < r) + (rank r's own passes), plus the
   optimizer. Arithmetic only: no simulation.
3. best first, by the lowest lower bound not yet examined: a layout with a compute bound gets its passes bound, the
   same critical path with its real passes (layer templates timed on the simulated cluster, their TP and CP
   communication included; cached by what they depend on, as the compute bound's), which holds most of the rise to
   the next grade at a fraction of its cost; a layout with a passes bound gets its schedule bound, the makespan of
   those passes walked with the step's point-to-point rules (pipeline_parallel/p2p_timeline.py: blocking sends, the
   rendezvous, each send at least the quickest stage-to-stage send alone), or, where later, the end of the first or
   last stage's data-parallel stream, its collectives at their times alone released as those passes issue them
   (dp_stream.py: the buckets no backward hides), plus the optimizer; a layout with a schedule bound gets its
   interference bound where that is higher, each rank's passes slowed by the least the data-parallel communication
   beside them can slow them (interference_bound.py), plus the optimizer; a layout with an interference bound is
   simulated in full (StepModel). Each bound is below the next and the step (a pass takes at least its kernels' time;
   the step's times only grow with its passes' and transfers'; communication and contention only add), so the search
   stops when at least `simulate_at_least` layouts are simulated and no bound left is below the best simulated step:
   the best is then proven best (`proven`). At most `max_simulate` are simulated; each batch goes to the workers most
   passes first.
4. on request, the scenario's own layout (the base config as given) evaluated and ranked among them, and the best
   simulated rows simulated again with interference off (how much their ranking rests on overlap).
Workers (local processes, or Ray's: workers.RayPool) keep their layer templates and the cluster between layouts.
"""
from __future__ import annotations

import functools
import heapq
import itertools
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from ..engine.sim import fewer_collections
from ..errors import OutOfMemoryError, SimcommError
from ..session import Session
from ..workers import RayPool
from .config import ConfigError, TrainingConfig
from .dims import LayoutError
from .dp_stream import stream_bound
from .frameworks import refusal
from .interference_bound import interference_bound, loss_all_reduce
from .layer_timing import PROGRAMS, Template, TemplateCache
from .layout import build_layout
from .model.memory import stage_memory
from .pipeline_parallel.actions import Overlap, computations, has_pairs
from .pipeline_parallel.p2p_timeline import p2p_timeline
from .pipeline_parallel.pair_timing import timed_schedule
from .pipeline_parallel.schedules import SCHEDULES
from .pipeline_parallel.timeline import timeline
from .pipeline_parallel.timing import send_bytes
from .step_cost import StepModel, optimizer_seconds
from .step_passes import build_pass

RECOMPUTE_NAMES = {None: "none", "selective": "selective", "full": "full"}


@dataclass(frozen=True)
class SearchSpace:
    """The values each dimension may take (None: every value that can work)."""

    tp: tuple[int, ...] | None = None  # None: the divisors of a node's GPUs
    pp: tuple[int, ...] | None = None  # None: the divisors of the GPUs left, up to the layers
    cp: tuple[int, ...] | None = None  # None: the divisors of the GPUs left that split the sequence (see cp_sizes)
    micro_batch_size: tuple[int, ...] = (1, 2, 4)
    # Megatron-LM's and GPipe by default; the zero-bubble, V and DualPipe schedules when asked (--schedules): their
    # start bounds are loose, so a plan must simulate many more layouts in full to prove its best (the 70B plan on
    # 1,024 GPUs: 369 s wall with all ten, 17 s with these three, on an idle 2-core machine)
    schedules: tuple[str, ...] = ("1f1b", "interleaved_1f1b", "gpipe")
    zero: tuple[int, ...] = (0, 1, 2, 3)
    recompute: tuple[str | None, ...] = (None, "selective", "full")
    max_virtual: int = 8
    ep: tuple[int, ...] | None = None  # MoE models; None: the divisors of the experts that divide a stage's GPUs
    etp: tuple[int, ...] | None = None  # None: 1 and tp (Megatron-Core's default)
    framework: str | None = None  # only the layouts this framework runs (frameworks.py); None: any


@dataclass(frozen=True)
class Candidate:
    tp: int
    pp: int
    cp: int
    mbs: int
    schedule: str
    v: int
    zero: int
    recompute: str | None
    ep: int = 1
    etp: int | None = None  # None: tp

    def config(self, base: TrainingConfig) -> TrainingConfig:
        return base.replace(tensor_model_parallel_size=self.tp, pipeline_model_parallel_size=self.pp,
                            context_parallel_size=self.cp, micro_batch_size=self.mbs, sequence_parallel=self.tp > 1,
                            pipeline_schedule=self.schedule if self.schedule != "interleaved_1f1b" else "auto",
                            num_layers_per_virtual_pipeline_stage=None,
                            virtual_pipeline_model_parallel_size=self.v if self.v > 1 else None,
                            zero_stage=self.zero, data_parallel_sharding_strategy=None,
                            use_distributed_optimizer=self.zero >= 1, overlap_grad_reduce=True,
                            overlap_param_gather=self.zero in (1, 2), recompute_granularity=self.recompute,
                            recompute_method="uniform", recompute_num_layers=None,
                            expert_model_parallel_size=self.ep, expert_tensor_parallel_size=self.etp)

    @classmethod
    def of(cls, layout) -> "Candidate":
        """The candidate with a layout's sizes, schedule, ZeRO stage, recomputation and expert grid."""
        c, d = layout.config, layout.dims
        return cls(d.tp, d.pp, d.cp, c.micro_batch_size, layout.schedule_name, layout.chunks, c.stage,
                   c.recompute_granularity, c.expert_model_parallel_size, c.expert_tensor_parallel_size)

    @property
    def label(self) -> str:
        sched = SCHEDULES[self.schedule].short_name(self.v)
        experts = f" ep{self.ep}" + (f" etp{self.etp}" if self.etp not in (None, self.tp) else "") \
            if self.ep > 1 or self.etp not in (None, self.tp) else ""
        return (f"tp{self.tp} pp{self.pp} cp{self.cp}{experts} mbs{self.mbs} {sched} zero{self.zero} "
                f"{RECOMPUTE_NAMES[self.recompute]}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def cp_sizes(model, world: int, tp: int) -> list[int]:
    """Context-parallel sizes that can work with `tp`: divisors of world / tp that split the sequence into 2 cp
    equal chunks (Megatron's causal load balancing), each cp rank's sequence divisible by tp (sequence
    parallelism, on whenever tp > 1)."""
    s = model.seq_length
    return [c for c in _divisors(world // tp) if c == 1 or s % (2 * c) == 0 and (s // c) % tp == 0]


def expert_sizes(model, stage: int, tp: int, space: SearchSpace) -> list[tuple[int, int | None]]:
    """(ep, etp) pairs for a mixture of experts on `stage` GPUs per pipeline stage: ep divides the experts, etp is
    1 or tp, and ep x etp divides the stage (Megatron-Core's folding); (1, None) for a dense model."""
    if not model.is_moe:
        return [(1, None)]
    eps = space.ep or [e for e in _divisors(model.num_moe_experts) if stage % e == 0]
    etps = space.etp or sorted({1, tp})
    return [(e, None if t == tp else t) for e in eps for t in etps if stage % (e * t) == 0]


def candidates(model, base: TrainingConfig, world: int, ranks_per_node: int, space: SearchSpace) -> list[Candidate]:
    """Every combination of the space's values whose sizes fit together (before Megatron's finer rules)."""
    out = []
    tps = space.tp or [t for t in _divisors(ranks_per_node) if world % t == 0]
    shapes = [(tp, cp) for tp in tps for cp in (space.cp or (cp_sizes(model, world, tp) if world % tp == 0 else []))]
    for tp, cp in shapes:
        if world % (tp * cp):
            continue
        pps = space.pp or [p for p in _divisors(world // (tp * cp)) if p <= model.num_layers]
        for pp in pps:
            if world % (tp * cp * pp):
                continue
            dp = world // (tp * cp * pp)
            for mbs in space.micro_batch_size:
                if base.global_batch_size % (mbs * dp):
                    continue
                m = base.global_batch_size // (mbs * dp)
                for sched, zero, rc in itertools.product(space.schedules, space.zero, space.recompute):
                    if pp == 1 and sched != "1f1b" or zero == 3 and model.is_moe or zero and dp * cp == 1 or \
                            refusal(space.framework, pp=pp, cp=cp, schedule=sched, zero=zero):
                        continue
                    vs = [1]
                    if SCHEDULES[sched].chunks in ("any", "many"):  # the loop schedules with virtual stages
                        per = model.num_layers // pp if model.num_layers % pp == 0 else 0
                        vs = [v for v in range(2, space.max_virtual + 1) if per and per % v == 0 and m >= pp]
                    out += [Candidate(tp, pp, cp, mbs, sched, v, zero, rc, ep, etp) for v in vs
                            for ep, etp in expert_sizes(model, world // pp, tp, space)]
    return out


# ---- workers -------------------------------------------------------------------------------------------------
_STATE: dict = {}


def _init(cluster, model, base) -> None:
    _STATE.update(cluster=cluster, model=model, base=base, templates=TemplateCache(cluster), kernels={}, seconds={},
                  ranks={}, alone=None, collectives={}, sends={}, timelines={})


def _layout(c: Candidate | TrainingConfig, check_schedule: bool = True):
    model = _STATE["model"]
    cfg = c if isinstance(c, TrainingConfig) else c.config(_STATE["base"])
    return build_layout(model, cfg, _STATE["cluster"].num_ranks, check_schedule)


def schedule_key(c: Candidate) -> tuple:
    """What the candidate's schedule depends on besides the global batch (workers get candidates in this order,
    so consecutive layouts share a schedule)."""
    return c.schedule, c.pp, c.v, c.tp * c.cp * c.pp / c.mbs  # micro-batches = batch x tp cp pp / (mbs GPUs)


def _kernel_templates(sim: StepModel) -> dict[str, Template]:
    """Each program as a template of its kernels alone: the compute stream's seconds, no communication."""
    moe = sim.layout.moe_layer_shape
    key = (sim.shape, moe, sim.cm.key)
    if key not in _STATE["kernels"]:
        out = {}
        for name, program in PROGRAMS.items():
            for prefix, shape in (("", sim.shape), ("moe_", moe)):
                if shape is None or prefix and not name.startswith("layer."):
                    continue
                steps = program(shape)
                busy = sum(sum(sim.cm.kernel(k) for k in st.compute) for st in steps)
                out[prefix + name] = Template(name, busy, busy, {}, sum(k.flops for st in steps for k in st.compute))
        _STATE["kernels"][key] = out
    return _STATE["kernels"][key]


def _pass_seconds(sim: StepModel, real: bool = False):
    """seconds(rank, chunk, phase): a pass's seconds, by what they depend on (shared by many layouts): its kernels
    alone (the compute bound's), or (`real`) from its layer templates on the rank's stage, communication and
    all, as the step builds it."""
    L, cfg = sim.layout, sim.cfg
    cache = _STATE["seconds"]
    recompute = (cfg.recompute_granularity, cfg.recompute_method, cfg.recompute_num_layers)
    kernels = ("kernels", sim.shape, L.moe_layer_shape, sim.cm.key)
    ranks: dict = {}  # rank -> (its templates, their key)

    def seconds(rank: int, chunk: int, phase: str) -> float:
        got = ranks.get(rank)
        if got is None:
            tpls = sim.rank_templates(rank) if real else _kernel_templates(sim)
            got = ranks[rank] = (tpls, tpls.key if real else kernels)
        key = (got[1], recompute, phase, L.moe_pattern(rank, chunk), L.has_embedding(rank, chunk),
               L.has_output(rank, chunk))
        out = cache.get(key)
        if out is None:
            out = cache[key] = build_pass(L, rank, chunk, phase, got[0]).duration
        return out
    return seconds


def compute_bound(layout, seconds, optimizer: float) -> float:
    """The schedule's critical path with passes of `seconds(rank, chunk, phase)`: rank r starts with
    micro-batch 0's first forward, after ranks < r ran theirs, and ends with a last backward of model chunk 0,
    which ranks < r then run; between, it runs every one of its passes. Holds for GPipe, 1F1B and interleaved
    1F1B (a lower bound of their makespan); exact for 1F1B with uniform stages. The other schedules end with
    weight gradients that nothing waits for, or start from both ends: `_start_bound`."""
    if _starts_bound(layout):
        return _start_bound(layout, seconds) + optimizer
    return _critical_path(layout.microbatches, _rank_seconds(layout, seconds)) + optimizer


def _starts_bound(layout) -> bool:
    """Whether the schedule's bound is `_start_bound` (split backward, or stages not placed in a loop)."""
    return SCHEDULES[layout.schedule_name].splits_backward or layout.placement.style != "loop"


def _rank_seconds(layout, seconds) -> tuple[tuple[float, float], ...]:
    """Per pipeline rank: (its passes of one micro-batch, its first forward and backward of model chunk 0)."""
    return tuple((sum(seconds(r, c, "F") + seconds(r, c, "B") for c in range(layout.chunks)),
                  seconds(r, 0, "F") + seconds(r, 0, "B")) for r in range(layout.dims.pp))


def _critical_path(m: int, ranks: tuple[tuple[float, float], ...]) -> float:
    edge, out = 0.0, 0.0
    for passes, first in ranks:
        out = max(out, edge + m * passes)
        edge += first
    return out


def _start_bound(layout, seconds) -> float:
    """Each rank's first pass waits for the forwards that feed it (from rank 0, or in DualPipe from whichever end
    is nearer), then the rank runs every one of its passes: the latest such end."""
    pp, placement, out = layout.dims.pp, layout.placement, 0.0
    for r, acts in enumerate(layout.schedule):
        first = next(computations(acts))
        edge, at = 0.0, placement.prev(r, first.chunk)
        while at is not None:
            edge += seconds(at[0], at[1], "F")
            at = placement.prev(*at)
        out = max(out, edge + sum(seconds(r, a.chunk, a.phase) for a in computations(acts)))
    return out


def screen(c: Candidate) -> dict:
    """Memory and, when it fits, the compute bound of one candidate (a row; `error` when it cannot be built)."""
    row = {"layout": c.label, **c.__dict__, "recompute": RECOMPUTE_NAMES[c.recompute]}
    return _screen(c, row)


def _screen(c: Candidate | TrainingConfig, row: dict) -> dict:
    cluster = _STATE["cluster"]
    try:  # memory and the compute bound read the schedule's shape; bound() and simulate() check what they run
        layout = _layout(c, check_schedule=False)
    except (LayoutError, SimcommError) as exc:
        return {**row, "error": str(exc)}
    cap = cluster.device.memory_capacity
    fp8 = layout.config.fp8_format is not None
    mem = [stage_memory(layout, r, cap, fp8) for r in range(layout.dims.pp)]
    worst = max(mem, key=lambda x: x.peak)
    row.update(dp=layout.dims.dp, microbatches=layout.microbatches, peak_memory=worst.peak, capacity=cap,
               fits=all(x.fits for x in mem))
    if not row["fits"]:
        return row
    sim = StepModel(layout, cluster, templates=_STATE["templates"], check_memory=False)
    optimizer = max(optimizer_seconds(layout, r, sim.cm) for r in range(layout.dims.pp))
    cfg = layout.config  # what the passes' kernels depend on, shared by layouts of other batches and ZeRO stages
    key = (sim.shape, sim.cm.key, layout.stage_layers, cfg.recompute_granularity, cfg.recompute_method,
           cfg.recompute_num_layers, layout.dims.ep, layout.dims.etp)  # the experts' grid changes MoE passes
    if _starts_bound(layout):
        bound_ = compute_bound(layout, _pass_seconds(sim), optimizer)
    else:
        ranks = _STATE["ranks"].get(key)
        if ranks is None:
            ranks = _STATE["ranks"][key] = _rank_seconds(layout, _pass_seconds(sim))
        bound_ = _critical_path(layout.microbatches, ranks) + optimizer
    row.update(bound=bound_ * (1 - 1e-9), bound_kind="compute")  # slack: sums in another order than the templates'
    return row


def passes_bound(c: Candidate) -> dict:
    """The compute bound again, of one candidate that fits, with its real passes (their layer templates: TP and
    CP communication and what it slows, as the step runs them) instead of their kernels alone: most of the
    schedule bound's rise above the compute bound, without its point-to-point walk and data-parallel dry run.
    A schedule with overlapped pairs (whose passes run at the pair's times, not one after another) gets its
    schedule bound instead. Arithmetic on the schedule's order, as the screening's: its layout is built as
    the screening's."""
    layout = _layout(c, check_schedule=False)
    if has_pairs(layout.schedule):
        return bound(c)
    sim = StepModel(layout, _STATE["cluster"], templates=_STATE["templates"], check_memory=False)
    optimizer = max(optimizer_seconds(layout, r, sim.cm) for r in range(layout.dims.pp))
    return {"bound": compute_bound(layout, _pass_seconds(sim, real=True), optimizer) * (1 - 1e-9),
            "bound_kind": "passes"}


def bound(c: Candidate) -> dict:
    """The schedule bound of one candidate that fits: the makespan of its real passes with the step's
    point-to-point rules, or the end of a data-parallel stream where that is later, plus the optimizer."""
    return _schedule_bound(*_passes(c))


def _schedule_bound(layout, sim, passes: dict, optimizer: float) -> dict:
    spans = pipeline_bound(layout, passes, send_bound(layout, sim))
    ready = stream_bound(layout, passes, _STATE["cluster"], _STATE["collectives"], spans)
    return {"bound": max([ready] + [e for mine in spans for _s, e in mine]) + optimizer, "bound_kind": "schedule"}


def pipeline_bound(layout, passes: dict, comm: float) -> list[list[tuple[float, float]]]:
    """Per pipeline rank, (start, end) of each of its computations in the schedule's timeline of the passes alone,
    each send `comm` seconds: with the step's point-to-point rules (p2p_timeline.py), or as timing.py runs
    overlapped pairs (timed_schedule; a pair's passes both at the pair's times) for the schedules that have them."""
    cluster, cache = _STATE["cluster"], _STATE["collectives"]
    sched, duration = timed_schedule(layout, passes)
    loss = functools.cache(lambda r: loss_all_reduce(layout, cluster, cache, r))  # asked after every last forward
    if not has_pairs(layout.schedule):  # p2p_timeline walks it
        return _p2p_spans(layout, passes, comm, loss, duration)
    times = timeline(sched, duration, comm=comm, placement=layout.placement)
    return [[(t.start, t.end) for t in mine for _x in (t.action.parts if isinstance(t.action, Overlap) else
                                                       (t.action,))] for mine in times]


def _p2p_spans(layout, passes: dict, comm: float, loss, duration) -> list[list[tuple[float, float]]]:
    """p2p_timeline's spans of a schedule without overlapped pairs, from the worker's latest (read-only)."""
    kept = _STATE["timelines"]
    key = _timeline_key(layout, passes, comm, loss)
    spans = kept.get(key)
    if spans is None:
        spans = p2p_timeline(layout, duration, comm, loss)
        if len(kept) >= TIMELINES_KEPT:
            del kept[next(iter(kept))]
        kept[key] = spans
    return spans


TIMELINES_KEPT = 16  # a worker's latest timelines (each up to a step's passes): its batch's ZeRO siblings


def _timeline_key(layout, passes: dict, comm: float, loss) -> tuple:
    """What p2p_timeline's spans depend on: the schedule, the p2p settings, each pass's and send's seconds and the
    loss all-reduce of the ranks that end the model; shared by layouts that differ in their ZeRO stage only."""
    cfg, dims, placement = layout.config, layout.dims, layout.placement
    ends = [r for r in range(dims.pp) if any(placement.next(r, c) is None for c in range(layout.chunks))]
    return (layout.schedule_key, cfg.p2p_rendezvous, cfg.overlap_p2p_comm, comm,
            tuple((k, p.duration) for k, p in passes.items()), tuple(loss(r) for r in ends))


def send_bound(layout, sim: StepModel) -> float:
    """The least seconds an activation or gradient takes between two pipeline ranks: the quickest of the stages'
    sends (pipeline_parallel/timing.py's, one replica's TP ranks to the next stage's) alone on the cluster;
    contention, the rendezvous and Megatron's all-gather after a scattered send only add to it."""
    dims = layout.dims
    if layout.config.ideal_network or dims.pp == 1:
        return 0.0
    nbytes = send_bytes(layout, sim.activation_bytes)[0]
    ranks = [dims.ranks(pp=r, dp=0).reshape(-1) for r in range(dims.pp)]
    pairs = {(r, at[0]) for r in range(dims.pp) for c in range(layout.chunks)
             for at in (layout.placement.next(r, c),) if at is not None and at[0] != r}
    return min(_send_alone(ranks[a], ranks[b], nbytes) for p in pairs for a, b in (p, p[::-1]))


def _send_alone(src, dst, nbytes: float) -> float:
    key = (src.tobytes(), dst.tobytes(), nbytes)
    got = _STATE["sends"].get(key)
    if got is None:
        s = Session(_STATE["cluster"], detail="steps")
        op = s.send(src, dst, nbytes)
        s.run(op)
        got = _STATE["sends"][key] = (op.end - op.start) * (1 - 1e-9)
    return got


def slowed_bound(c: Candidate) -> dict:
    """The interference bound of a candidate that fits: its passes slowed by the least the data-parallel
    communication beside them can slow them (interference_bound.py), plus the optimizer (the search keeps the
    schedule bound where that is higher)."""
    layout, sim, passes, optimizer = _passes(c)
    slowed = interference_bound(layout, passes, _STATE["cluster"], _STATE["collectives"], send_bound(layout, sim))
    return {"bound": slowed + optimizer,
            "bound_kind": "interference"}


def _passes(c: Candidate):
    layout = _layout(c)
    sim = StepModel(layout, _STATE["cluster"], templates=_STATE["templates"], check_memory=False)
    optimizer = max(optimizer_seconds(layout, r, sim.cm) for r in range(layout.dims.pp))
    return layout, sim, sim.build_passes(), optimizer


def simulate(c: Candidate | TrainingConfig) -> dict:
    """A full step of one candidate (or config) on the simulated cluster."""
    sim = StepModel(_layout(c), _STATE["cluster"], templates=_STATE["templates"])
    try:
        res = sim.run()
    except OutOfMemoryError as exc:
        return {"error": str(exc)}
    b = res.breakdown
    comm = sum(b.get(k, 0.0) for k in ("tp", "cp", "ep", "pp", "dp"))
    return {"step_time": res.step_time, "tflops_per_gpu": res.tflops_per_gpu, "mfu": res.mfu, "hfu": res.hfu,
            "tokens_per_second": res.tokens_per_second, "bubble_share": b["bubble"] / res.step_time,
            "exposed_comm_share": comm / res.step_time, "interference_share": b.get("interference", 0.0) /
            res.step_time, "breakdown": b}


def simulate_alone(c: Candidate | TrainingConfig) -> dict:
    """A full step of one candidate with compute and communication not sharing the GPUs (interference off)."""
    if _STATE["alone"] is None:
        _STATE["alone"] = TemplateCache(_STATE["cluster"], interference=False)
    sim = StepModel(_layout(c), _STATE["cluster"], templates=_STATE["alone"], check_memory=False,
                    interference=False)
    return {"step_time_alone": sim.run().step_time}


def evaluate(cfg: TrainingConfig) -> dict:
    """A config as given (the scenario's own layout): memory, and a full step when it fits."""
    row: dict = {}
    try:
        layout = _layout(cfg)
    except (LayoutError, SimcommError) as exc:
        return {"error": str(exc)}
    c = Candidate.of(layout)
    row.update(c.__dict__, layout=c.label, recompute=RECOMPUTE_NAMES[c.recompute])
    row = _screen(cfg, row)
    if row.get("fits"):
        row.update(simulate(cfg))
    return row


@dataclass
class PlanResult:
    rows: list[dict]  # every candidate, best first: simulated, then bounded, then out of memory, then invalid
    enumerated: int
    simulated: int
    proven: bool  # no unsimulated layout's lower bound is below the best simulated step time
    notes: list[str] = field(default_factory=list)
    own: dict | None = None  # the base config's own layout, evaluated (plan(own=True)); `candidate`: in the space

    @property
    def feasible(self) -> list[dict]:
        return [r for r in self.rows if r.get("fits")]

    @property
    def schedule_bounds(self) -> int:
        """Layouts whose schedule bound was computed (the others that fit have a compute or a passes bound)."""
        return sum(r.get("bound_kind") in ("schedule", "interference") for r in self.rows)

    @property
    def passes_bounds(self) -> int:
        """Layouts whose refinement stopped at their passes bound."""
        return sum(r.get("bound_kind") == "passes" for r in self.rows)


def _gently(fn, x):
    """fn(x) with the garbage collector started as seldom as in a simulation (engine.sim.fewer_collections): a
    plan's workers make and drop layouts, schedules and passes by the hundred thousand."""
    with fewer_collections():
        return fn(x)


def _map(pool, fn, items, progress, done, total):
    results = []
    fn = functools.partial(_gently, fn)
    if pool is None:
        for x in items:
            results.append(fn(x))
            done[0] += 1
            if progress:
                progress(done[0], total[0])
        return results
    for r in pool.map(fn, items, chunksize=max(1, len(items) // (8 * pool._max_workers) or 1)):
        results.append(r)
        done[0] += 1
        if progress and (done[0] % 8 == 0 or done[0] == total[0]):
            progress(done[0], total[0])
    return results


BOUND_BATCH, SIMULATE_BATCH = 16, 4  # fixed, so the plan does not depend on the number of workers


def world_of(base: TrainingConfig, cluster) -> int:
    """The GPUs a plan lays out: the config's world_size, every GPU of the cluster when 0."""
    if base.world_size > cluster.num_ranks:
        raise ConfigError(f"world_size {base.world_size} is more than the {cluster.num_ranks} GPUs of "
                          f"{cluster.name}", "world_size")
    return base.world_size or cluster.num_ranks


def plan(model, base: TrainingConfig, cluster, space: SearchSpace = SearchSpace(), jobs: int | None = None,
         simulate_at_least: int = 16, max_simulate: int = 64, progress=None, ray: bool = False,
         ray_address: str | None = None, own: bool = False, alone: int = 0) -> PlanResult:
    """Search the layouts of `model` on `cluster` at `base`'s global batch (see the module docstring); `ray`: on
    the Ray cluster at `ray_address` (a local one when empty) instead of `jobs` local processes, with the same
    result; `own`: evaluate `base` as given too (PlanResult.own); `alone`: simulate the best `alone` simulated rows
    again with interference off (their `step_time_alone`)."""
    world = world_of(base, cluster)
    given = base  # the scenario's own layout, as given; the candidates take the framework searched for
    base = replace(base, framework=space.framework) if space.framework else base
    cands = candidates(model, base, world, cluster.ranks_per_node, space)
    if not cands:
        raise ConfigError(f"global_batch_size {base.global_batch_size}: no layout of the search space splits it "
                          f"over {world} GPUs (data-parallel size x micro-batch size must divide it, and tp x cp x "
                          f"pp x dp = {world})", "global_batch_size")
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(cands)))
    done, total = [0], [len(cands) + simulate_at_least]
    if ray:
        pool = RayPool(ray_address, "a plan", _init, (cluster, model, base))
    else:
        pool = ProcessPoolExecutor(jobs, initializer=_init, initargs=(cluster, model, base)) if jobs > 1 else None
    if pool is None:
        _init(cluster, model, base)

    def run(fn, idx):
        total[0] = max(total[0], done[0] + len(idx))
        return zip(idx, _map(pool, fn, [cands[i] for i in idx], progress, done, total))

    mine = None
    try:
        rows = [None] * len(cands)
        for i, row in run(screen, sorted(range(len(cands)), key=lambda i: (schedule_key(cands[i]), i))):
            rows[i] = row
        if all("error" in r for r in rows):
            reasons = list(dict.fromkeys(r["error"] for r in rows))
            raise ConfigError(f"none of the {len(rows)} layouts can be built: " + "; ".join(reasons[:3]) +
                              (f"; and {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""), None)
        simulated, proven = _best_first(rows, run, simulate_at_least, max_simulate)
        rows_alone = sorted((i for i, r in enumerate(rows) if "step_time" in r), key=lambda i: rows[i]["step_time"])
        for i, res in run(simulate_alone, rows_alone[:alone]):
            rows[i].update(res)
        if own:
            mine = _own(given, base, cands, rows, lambda fn, x: _map(pool, fn, [x], progress, done, total)[0])
            if alone and "step_time" in mine and "step_time_alone" not in mine:
                mine.update(_map(pool, simulate_alone, [given], progress, done, total)[0])
    finally:
        if pool is not None:
            pool.shutdown()

    def key(r):
        if "step_time" in r:
            return (0, r["step_time"])
        if "bound" in r:
            return (1, r["bound"])
        return (2, r.get("peak_memory", float("inf"))) if "error" not in r else (3, 0.0)
    rows.sort(key=key)
    return PlanResult(rows, len(cands), simulated, proven, own=mine)


REFINE = {"compute": passes_bound, "passes": bound, "schedule": slowed_bound}  # each grade refined to the next


def _best_first(rows: list[dict], run, simulate_at_least: int, max_simulate: int) -> tuple[int, bool]:
    """Simulate layouts best first over their lower bounds, `run(fn, indices)` doing the work: a compute bound is
    refined to a passes bound, that to a schedule bound, that to an interference bound, an interference bound
    simulated, until the best simulated step is below every bound left (proven) or `max_simulate` ran. Returns
    (layouts simulated, proven). The layouts simulated are those of the lowest final bounds (each the highest of
    its grades) whichever grades there are: a grade only spares work."""
    heap = [(r["bound"], i) for i, r in enumerate(rows) if "bound" in r]
    heapq.heapify(heap)
    simulated = 0
    best = float("inf")
    while heap and simulated < max_simulate:
        if simulated >= simulate_at_least and heap[0][0] >= best:
            break
        want = SIMULATE_BATCH if simulated >= simulate_at_least else simulate_at_least - simulated
        want = min(want, max_simulate - simulated)
        # the lowest bounds: refine the loosest grade among them until the lowest `want` are interference bounds
        top = [t for t in heapq.nsmallest(want, heap) if simulated < simulate_at_least or t[0] < best]
        kind = next((k for k in REFINE if any(rows[i]["bound_kind"] == k for _b, i in top)), None)
        if kind is not None:
            # past the first simulations, a bound not below the best step is pruned at any grade: not refined
            batch = [i for b, i in heapq.nsmallest(max(BOUND_BATCH, want), heap) if rows[i]["bound_kind"] == kind
                     and (simulated < simulate_at_least or b < best)]
            drop = set(batch)
            heap = [(b, i) for b, i in heap if i not in drop]
            for i, res in run(REFINE[kind], _longest_first(rows, batch)):
                res["bound"] = max(res["bound"], rows[i]["bound"])  # each grade a lower bound: the highest holds
                rows[i].update(res)
                heap.append((res["bound"], i))
            heapq.heapify(heap)
            continue
        batch = [heapq.heappop(heap)[1] for _ in top]
        for i, res in run(simulate, _longest_first(rows, batch)):
            rows[i].update(res)
            if "step_time" in res:
                best = min(best, res["step_time"])
        simulated += len(batch)
    return simulated, not heap or heap[0][0] >= best


def _longest_first(rows: list[dict], batch: list[int]) -> list[int]:
    """A batch in the order the workers should take it: the most passes first (a step's and a bound's cost grows
    with them), so that no worker is left with a long one at the end while the other waits. Its results do not
    depend on the order."""
    return sorted(batch, key=lambda i: -rows[i]["pp"] * rows[i]["v"] * rows[i]["microbatches"])


def _own(given: TrainingConfig, base: TrainingConfig, cands: list[Candidate], rows: list[dict], call) -> dict:
    """The scenario's own layout: the candidate's row when the search built the very same config (simulated
    if it was not), else `base` evaluated as given; `candidate` is whether the search space holds it."""
    for i, c in enumerate(cands):
        if c.config(base) == given:
            if "bound" in rows[i] and "step_time" not in rows[i]:
                rows[i].update(call(simulate, c))
            return {**rows[i], "candidate": True}
    return {**call(evaluate, given), "candidate": False}
