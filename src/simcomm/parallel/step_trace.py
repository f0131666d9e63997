"""The trace of a training step: what each GPU ran, for the timeline's readers (Perfetto, Holistic Trace Analysis).

The step model records each pass as one compute job on its stage's GPUs (an annotation: it covers kernels and the
waits between them). Made only when the timeline is read, the trace adds each pass's layers (annotations too),
their kernels and their TP/CP communication, placed where they ran: the layer templates' segments (layer_timing.py)
mapped through the pass's job progress (engine/progress.py), so a kernel slowed by a collective beside it is as
long as it ran, and a wait is as long as it was.

Symmetry keeps this small and every rank complete. The GPUs of a pipeline stage in one data-parallel replica run
the same kernels at the same times (their layer programs are one template, their data-parallel groups alike), and
every replica runs what the simulated one runs; the step model simulates one replica and, where the TP ranks'
data-parallel groups cross disjoint links, the data-parallel traffic of its first TP rank only (step_cost.py). So
each stage's first GPU (each TP rank's, where they were simulated apart) is traced, and RankCopies says which
traced GPU every rank of the layout is a copy of, with which ranks renamed: a copy is exact by that symmetry.
"""
from __future__ import annotations

import numpy as np

from ..engine.trace import Activity, overlap, union
from .pipeline_parallel.actions import FORWARD, PHASE_NAMES

LAYER_BUDGET = 100_000  # layers and their TP/CP transfers in the timeline at most (else of the traced GPUs only)
KERNEL_BUDGET = 500_000  # layers, kernels and TP/CP transfers of the traced GPUs at most (else only the passes)


class RankCopies:
    """Which traced GPU (`source`) each rank of the layout is a copy of, and how the source's peers are renamed
    for it (`rename`: a permutation of the layout's ranks, a shift along tp, cp and dp)."""

    def __init__(self, dims, tp_sources):
        self.dims = dims
        self.tp_sources = tuple(int(t) for t in tp_sources)
        self.sources = tuple(int(dims.ranks(pp=r, dp=0, cp=0, tp=t)) for r in range(dims.pp) for t in self.tp_sources)

    @property
    def ranks(self) -> range:
        return range(self.dims.world_size)

    def source(self, rank: int) -> int:
        c = self.dims.coords(rank)
        tp = c["tp"] if c["tp"] in self.tp_sources else self.tp_sources[0]
        return int(self.dims.ranks(pp=c["pp"], dp=0, cp=0, tp=tp))

    def rename(self, rank: int) -> np.ndarray:
        """ranks -> ranks: where each rank of the source's records is for `rank` (the identity for a source)."""
        src, dst = self.dims.coords(self.source(rank)), self.dims.coords(rank)
        grid = self.dims.grid  # (pp, dp, cp, tp)
        shift = tuple(dst[a] - src[a] for a in ("dp", "cp", "tp"))
        rolled = np.roll(grid, shift, axis=(1, 2, 3))
        out = np.empty(grid.size, dtype=np.int64)
        out[rolled.reshape(-1)] = grid.reshape(-1)
        return out

    def describe(self) -> str:
        """What the copies are, for a person."""
        others = self.dims.world_size - len(self.sources)
        if not others:
            return "every rank was simulated"
        what = "its stage's first GPU" if len(self.tp_sources) == 1 else "the GPU of its stage and TP rank"
        return (f"{len(self.sources)} GPUs traced ({', '.join(map(str, self.sources))}); each of the other {others} "
                f"is a copy of {what} in the simulated data-parallel replica, its peers renamed (exact: those GPUs "
                "run the same kernels at the same times)")


def trace_records(instances, kernels: bool) -> int:
    """Records of one GPU per pipeline stage for these pass instances: its layers and their TP/CP communication,
    and with `kernels` each kernel too (and both ends of a CP ring step). Counted once per distinct pass: a step
    runs each pass many times."""
    per_pass: dict[int, int] = {}
    total = 0
    for _r, _a, p, _jobs in instances:
        n = per_pass.get(id(p))
        if n is None:
            n = per_pass[id(p)] = _pass_record_count(p, kernels)
        total += n
    return total


def _pass_record_count(p, kernels: bool) -> int:
    if not kernels:
        return sum(1 + sum(seg.kind != "compute" for seg in part.template.segments) for part in p.parts)
    return sum(1 + sum(2 if seg.kind == "p2p" else 1 for seg in part.template.segments) for part in p.parts)


def pass_records(dims, stage: int, action, p, jobs, gpu: int, kernels: bool) -> list[Activity]:
    """The layers (annotations), TP/CP communication and (`kernels`) kernels of one pass on `gpu`, placed by the
    progress of the pass's compute jobs (`jobs`: (first part, end part, progress))."""
    forward = action.phase == FORWARD
    tp_group = tuple(dims.group_of(gpu, "tp").tolist())
    ring = dims.group_of(gpu, "cp").tolist()
    at = ring.index(gpu)
    nxt, prev = ring[(at + 1) % len(ring)], ring[at - 1]
    out = []
    for i, j, progress in jobs:
        parts = p.parts[i:j]
        offsets = []
        for x in parts:
            base = x.offset - parts[0].offset
            offsets += [base, base + x.template.duration]
            offsets += [base + t for seg in x.template.segments for t in (seg.start, seg.end)]
        times = iter(progress.times(gpu, offsets).tolist())
        for x in parts:
            name = "embedding" if x.layer == -1 else "output" if x.layer == -2 else f"L{x.layer}"
            phase = x.phase if x.phase == "recompute" else PHASE_NAMES[action.phase]
            tags = {"stage": stage, "microbatch": action.microbatch, "chunk": action.chunk, "layer": x.layer,
                    "phase": phase, "stream": "compute"}
            letter = "R" if x.phase == "recompute" else action.phase
            out.append(Activity(gpu, "compute", next(times), next(times), x.template.flops,
                                f"{letter}{action.microbatch} {name}", tags={**tags, "annotation": "layer"}))
            for seg in x.template.segments:
                s, e = next(times), next(times)
                if seg.kind == "compute":
                    if kernels:
                        out.append(Activity(gpu, "compute", s, e, seg.nbytes, seg.name, tags=tags))
                    continue
                st = {**tags, **seg.tags, "stream": seg.stream, "group": f"{seg.stream} group of stage {stage}"}
                if seg.kind == "collective":
                    out.append(Activity(gpu, seg.kind, s, e, seg.nbytes, seg.name, tags=st, group=tp_group))
                else:  # a context-parallel ring step: this GPU sends to the next and receives from the previous
                    out.append(Activity(gpu, seg.kind, s, e, seg.nbytes, seg.name, peer=nxt, tags=st))
                    out.append(Activity(prev, seg.kind, s, e, seg.nbytes, seg.name, peer=gpu, tags=st))
    return out


def communication_while_idle(step, activities, gpu: int) -> float:
    """Seconds `gpu`'s own communication (DP collectives, pipeline sends and receives) ran while its stage waited
    for work not yet produced: part of the breakdown's bubble, and of a profiler's non-compute time (HTA's)."""
    comm = [(a.start, a.end) for a in activities
            if (a.kind == "collective" and a.rank == gpu and "collective" in a.tags)
            or (a.kind == "p2p" and gpu in (a.rank, a.peer) and a.rank != a.peer)]
    return overlap(union(comm), union(step.bubbles[step.copies.dims.coords(gpu)["pp"]]))


def stage_figures(step, activities) -> dict[int, dict]:
    """{traced GPU: its stage's breakdown (seconds, as the report gives it) and the part of its bubble during
    which its own communication ran}: what a profiler's totals of that GPU are made of (docs/training.md)."""
    dims = step.copies.dims
    out = {}
    for gpu in step.copies.sources:
        stage = dims.coords(gpu)["pp"]
        breakdown = {k: step.stages[stage][k] for k in step.categories}  # as the report prints it
        out[gpu] = {"stage": stage, "step_time": step.step_time, "breakdown": breakdown,
                    "communication_while_idle": communication_while_idle(step, activities, gpu)}
    return out


def defer_trace(session, pipeline, copies: RankCopies, notes: list) -> None:
    """Have the timeline, when read, hold the layers and TP/CP communication of every GPU of the simulated
    replica (of the traced GPUs only past LAYER_BUDGET records), and when asked for kernels, the traced GPUs'
    layers, kernels and communication (the per-rank traces are made from those); past KERNEL_BUDGET only the
    passes, and a note says so."""
    instances, dims = pipeline.instances, pipeline.layout.dims
    sources = {r: [g for g in copies.sources if dims.coords(g)["pp"] == r] for r in range(dims.pp)}
    replica = {r: pipeline.ranks[r].tolist() for r in range(dims.pp)}
    kernels = trace_records(instances, True) * len(copies.tp_sources)
    if kernels > KERNEL_BUDGET:
        notes.append(f"the trace shows passes, not layers and kernels: {kernels:,} layer and kernel records would "
                     f"exceed {KERNEL_BUDGET:,}")
        return
    layers = replica if trace_records(instances, False) * len(replica[0]) <= LAYER_BUDGET else sources

    def produce(with_kernels: bool) -> list:
        traced = sources if with_kernels else layers
        return [act for r, a, p, jobs in instances for g in traced[r]
                for act in pass_records(dims, r, a, p, jobs, g, with_kernels)]
    session.sim.recorder.deferred(produce)


__all__ = ["KERNEL_BUDGET", "LAYER_BUDGET", "RankCopies", "communication_while_idle", "stage_figures", "defer_trace",
           "pass_records", "trace_records"]
