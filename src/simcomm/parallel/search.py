"""Layout search: every valid (tp, pp, cp, dp, micro-batch, schedule, virtual stages, ZeRO stage, recomputation)
for a model, a cluster and a global batch; the memory-feasible ones ranked by predicted step time.

Three passes, all deterministic:
1. enumerate: every combination Megatron-LM's rules allow (build_layout accepts it): tp divides the GPUs of a node
   and the heads, cp splits the sequence, pp divides the layers, dp = GPUs / (tp cp pp) divides the batch with the
   micro-batch; schedules 1F1B, GPipe and interleaved 1F1B with every v that divides the stage's layers. Sequence
   parallelism is on whenever tp > 1 (same traffic as all-reduce, less memory); gradient reduction overlaps the
   backward, and with the distributed optimizer (ZeRO >= 1) parameter gathers overlap the forward.
2. bound: per layout, peak memory per GPU (model/memory.py) and, for the ones that fit, a lower bound of the step
   time: the schedule's makespan (schedules.timeline) of the layout's real passes (layer templates timed on the
   simulated cluster) with free pipeline transfers, plus the optimizer. Communication and contention only add.
3. simulate: the layouts with the lowest bounds, in order, each a full step on the simulated cluster (StepModel);
   at least `simulate` of them, and then on while a bound is below the best simulated time (up to `max_simulate`),
   so the best layout is proven best when the search stops for that reason (`proven` in the result).
Workers (local processes) keep their layer templates and the cluster between layouts.
"""
from __future__ import annotations

import itertools
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from ..errors import OutOfMemoryError, SimcommError
from .dims import LayoutError
from .model.memory import stage_memory
from .pipeline_parallel.schedules import FORWARD, makespan, timeline
from .step import StepModel, TemplateCache, optimizer_seconds
from .step_config import TrainingConfig, build_layout

RECOMPUTE_NAMES = {None: "none", "selective": "selective", "full": "full"}


@dataclass(frozen=True)
class SearchSpace:
    """The values each dimension may take (None: every value that can work)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = (1,)
    micro_batch_size: tuple[int, ...] = (1, 2, 4)
    schedules: tuple[str, ...] = ("1f1b", "interleaved_1f1b", "gpipe")
    zero: tuple[int, ...] = (0, 1)
    recompute: tuple[str | None, ...] = (None, "selective", "full")
    max_virtual: int = 8


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

    def config(self, base: TrainingConfig, num_layers_per_stage: int) -> TrainingConfig:
        return replace(base, tensor_model_parallel_size=self.tp, pipeline_model_parallel_size=self.pp,
                       context_parallel_size=self.cp, micro_batch_size=self.mbs, sequence_parallel=self.tp > 1,
                       pipeline_schedule=self.schedule if self.schedule != "interleaved_1f1b" else "auto",
                       num_layers_per_virtual_pipeline_stage=num_layers_per_stage // self.v if self.v > 1 else None,
                       zero_stage=self.zero, use_distributed_optimizer=self.zero >= 1, overlap_grad_reduce=True,
                       overlap_param_gather=self.zero in (1, 2), recompute_granularity=self.recompute,
                       recompute_method="uniform", recompute_num_layers=None, world_size=0)

    @property
    def label(self) -> str:
        sched = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved_1f1b": f"1F1B-v{self.v}"}[self.schedule]
        return (f"tp{self.tp} pp{self.pp} cp{self.cp} mbs{self.mbs} {sched} zero{self.zero} "
                f"{RECOMPUTE_NAMES[self.recompute]}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(model, base: TrainingConfig, world: int, ranks_per_node: int, space: SearchSpace) -> list[Candidate]:
    """Every combination of the space's values whose sizes fit together (before Megatron's finer rules)."""
    out = []
    tps = space.tp or [t for t in _divisors(ranks_per_node) if world % t == 0]
    for tp, cp in itertools.product(tps, space.cp or _divisors(world)):
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
                    if pp == 1 and sched != "1f1b" or zero == 3 and pp > 1 or zero and dp * cp == 1:
                        continue
                    vs = [1]
                    if sched == "interleaved_1f1b":
                        per = model.num_layers // pp if model.num_layers % pp == 0 else 0
                        vs = [v for v in range(2, space.max_virtual + 1) if per and per % v == 0 and m >= pp]
                    out += [Candidate(tp, pp, cp, mbs, sched, v, zero, rc) for v in vs]
    return out


# ---- workers -------------------------------------------------------------------------------------------------
_STATE: dict = {}


def _init(cluster, model, base) -> None:
    _STATE.update(cluster=cluster, model=model, base=base, templates=TemplateCache(cluster))


def _layout(c: Candidate):
    model, base = _STATE["model"], _STATE["base"]
    return build_layout(model, c.config(base, model.num_layers // c.pp), _STATE["cluster"].num_ranks)


def bound(c: Candidate) -> dict:
    """Memory and a lower bound of the step time for one candidate (a row; `error` when it cannot be built)."""
    cluster = _STATE["cluster"]
    row = {"layout": c.label, **c.__dict__, "recompute": RECOMPUTE_NAMES[c.recompute]}
    try:
        layout = _layout(c)
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
    passes = sim.build_passes()
    times = timeline(layout.schedule, lambda r, a: passes[(r, a.chunk, "F" if a.phase == FORWARD else "B")].duration)
    row["bound"] = makespan(times) + max(optimizer_seconds(layout, r, sim.cm) for r in range(layout.dims.pp))
    return row


def simulate(c: Candidate) -> dict:
    """A full step of one candidate on the simulated cluster."""
    sim = StepModel(_layout(c), _STATE["cluster"], templates=_STATE["templates"])
    try:
        res = sim.run()
    except OutOfMemoryError as exc:
        return {"error": str(exc)}
    b = res.breakdown
    comm = sum(b[k] for k in ("tp", "cp", "pp", "dp"))
    return {"step_time": res.step_time, "tflops_per_gpu": res.tflops_per_gpu, "mfu": res.mfu, "hfu": res.hfu,
            "tokens_per_second": res.tokens_per_second, "bubble_share": b["bubble"] / res.step_time,
            "exposed_comm_share": comm / res.step_time, "breakdown": b}


@dataclass
class PlanResult:
    rows: list[dict]  # every candidate, best first: simulated, then bounded, then out of memory, then invalid
    enumerated: int
    simulated: int
    proven: bool  # no unsimulated layout's lower bound is below the best simulated step time
    notes: list[str] = field(default_factory=list)

    @property
    def feasible(self) -> list[dict]:
        return [r for r in self.rows if r.get("fits")]


def _map(pool, fn, items, progress, done, total):
    results = []
    if pool is None:
        for x in items:
            results.append(fn(x))
            done[0] += 1
            if progress:
                progress(done[0], total)
        return results
    for r in pool.map(fn, items, chunksize=max(1, len(items) // (8 * pool._max_workers) or 1)):
        results.append(r)
        done[0] += 1
        if progress and (done[0] % 8 == 0 or done[0] == total):
            progress(done[0], total)
    return results


def plan(model, base: TrainingConfig, cluster, space: SearchSpace = SearchSpace(), jobs: int | None = None,
         simulate_at_least: int = 16, max_simulate: int = 64, progress=None) -> PlanResult:
    """Search the layouts of `model` on `cluster` at `base`'s global batch (see the module docstring)."""
    cands = candidates(model, base, cluster.num_ranks, cluster.ranks_per_node, space)
    if not cands:
        raise SimcommError("no layout to try: the search space allows no (tp, cp, pp, dp) that divides "
                           f"{cluster.num_ranks} GPUs and the global batch {base.global_batch_size}")
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(cands)))
    done, total = [0], len(cands) + simulate_at_least
    pool = ProcessPoolExecutor(jobs, initializer=_init, initargs=(cluster, model, base)) if jobs > 1 else None
    if pool is None:
        _init(cluster, model, base)
    try:
        rows = _map(pool, bound, cands, progress, done, total)
        order = sorted((i for i, r in enumerate(rows) if "bound" in r), key=lambda i: (rows[i]["bound"], i))
        simulated, best = 0, float("inf")
        while simulated < len(order) and simulated < max_simulate:
            want = simulate_at_least if simulated == 0 else jobs
            batch = [i for i in order[simulated:simulated + want]]
            if simulated >= simulate_at_least and rows[batch[0]]["bound"] >= best:
                break
            total = max(total, done[0] + len(batch))
            for i, res in zip(batch, _map(pool, simulate, [cands[i] for i in batch], progress, done, total)):
                rows[i].update(res)
                if "step_time" in res:
                    best = min(best, res["step_time"])
            simulated += len(batch)
    finally:
        if pool is not None:
            pool.shutdown()
    rest = order[simulated:]
    proven = not rest or rows[rest[0]]["bound"] >= best

    def key(r):
        if "step_time" in r:
            return (0, r["step_time"])
        if "bound" in r:
            return (1, r["bound"])
        return (2, r.get("peak_memory", float("inf"))) if "error" not in r else (3, 0.0)
    rows.sort(key=key)
    return PlanResult(rows, len(cands), simulated, proven)
