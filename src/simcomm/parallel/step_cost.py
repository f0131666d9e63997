"""The step cost model: one training step of a layout, simulated on the cluster through the Session.

Who is simulated (symmetry, exact where contention allows): data-parallel replicas do identical work, so one
replica's pipeline is simulated (every stage, every TP and CP rank of it); the others appear only as the far ends
of its data-parallel collectives, which run over the full groups. Those groups are simulated for one TP rank
when the TP ranks' groups cross disjoint links (one NIC rail each, as on a rail-optimised fabric), else for all.
Layer programs (kernels, TP and CP communication) are timed once per distinct local layout (layer_timing.py) and
replayed; repeated data-parallel collectives are replayed when their links are quiet (step_traffic.py).

The step: the pipeline's stages walk their schedules (pipeline_parallel/timing.py), the data-parallel policy of
the layout's sharding scheme adds its gathers and reductions at the step's seams (data_parallel/timing.py); when
a stage's gradients are reduced, the tied-embedding all-reduce (first and last stage); once every stage is
there, a gradient-norm all-reduce over the replica and the optimizer (memory-bound Adam over the GPU's shard),
then what the policy still gathers. Not modelled: data loading, the per-step host overheads.
"""
from __future__ import annotations

import numpy as np

from ..engine import MEMORY_KERNEL, Mix
from ..errors import SimcommError
from ..session import Session
from .compute_model import ComputeModel
from .data_parallel.timing import data_parallel_timing
from .layer_timing import PROGRAMS, TemplateCache
from .model.flops import FORMULAS, recompute_flops_per_token
from .model.memory import check_fits, stage_memory, stage_parameters
from .pipeline_parallel.timing import Pipeline, StageTiming
from .step_passes import build_pass
from .step_result import StepResult
from .step_trace import RankCopies, defer_trace
from .step_traffic import Traffic

OPTIMIZER_MIX = Mix([1.0], [MEMORY_KERNEL])  # Adam: memory-bound


def optimizer_seconds(layout, rank: int, cm) -> float:
    """Adam over the GPU's shard at HBM rate: read master, moments and fp32 gradient, write master and moments
    (28 B/param, 24 without a master copy), cast to 16-bit parameters (6 B), the gradient norm (read the
    gradient) and zeroing the gradient buffer."""
    cfg, dims = layout.config, layout.dims
    n = sum(stage_parameters(layout, rank).values())
    shard = n / (dims.dp * dims.cp) if layout.sharding.optimizer_state else n
    adam = (28 if cfg.param_bytes < 4 else 24) + (6 if cfg.param_bytes < 4 else 0)
    zeroed = shard if layout.sharding.gradients else n
    return cm.memory(shard * (adam + cfg.grad_bytes) + zeroed * cfg.grad_bytes, "elementwise")


class StepModel:
    """Simulates one training step of `layout` on `cluster` (see the module docstring)."""

    def __init__(self, layout, cluster, *, detail: str = "steps", reuse: bool = True,
                 templates: TemplateCache | None = None, check_memory: bool = True):
        self.layout, self.cluster = layout, cluster
        self.cfg, self.dims = layout.config, layout.dims
        if self.dims.world_size > cluster.num_ranks:
            raise SimcommError(f"the layout needs {self.dims.world_size} GPUs; {cluster.name} has "
                               f"{cluster.num_ranks}")
        self.cm = ComputeModel(cluster.device, self.cfg.precision, fp8=self.cfg.fp8_format is not None)
        self.detail, self.reuse = detail, reuse
        self.templates = templates or TemplateCache(cluster)
        self.check_memory = check_memory
        self.shape = layout.layer_shape

    def memory(self) -> list:
        dev = self.cluster.device
        return [stage_memory(self.layout, r, dev.memory_capacity, self.cfg.fp8_format is not None)
                for r in range(self.dims.pp)]

    def build_passes(self) -> dict:
        """(pipeline rank, chunk, 'F' | 'B') -> Pass, from the layer templates (timed on the cluster once)."""
        L, cfg, dims = self.layout, self.cfg, self.dims
        tpls = [{name: self.templates.get(self.cm, dims.ranks(pp=r, dp=0), self.shape, cfg.act_dtype,
                                          cfg.ideal_network, name) for name in PROGRAMS} for r in range(dims.pp)]
        self.passes = {(r, c, ph): build_pass(L, r, c, ph, tpls[r]) for r in range(dims.pp)
                       for c in range(L.chunks) for ph in "FB"}
        return self.passes

    # ---- the step --------------------------------------------------------------------------------------------
    def run(self) -> StepResult:
        mem = self.memory()
        if self.check_memory:
            check_fits(mem, self.cluster.device.name)
        session = Session(self.cluster, detail=self.detail)
        traffic = Traffic(session, reuse=self.reuse, ideal=self.cfg.ideal_network)
        passes = self.build_passes()
        notes: list[str] = []
        reps = self._dp_representatives(traffic, notes)
        self._check_replay(traffic, reps, notes)
        dp = data_parallel_timing(self.layout, traffic, passes, reps)
        dp.start()
        pipeline = Pipeline(self.layout, session, traffic, passes, dp,
                            self.shape.sp_tokens * self.layout.model.hidden_size * self.shape.elem)
        ends = _StepEnd(self, pipeline, reps).simulate()
        copies = RankCopies(self.dims, reps)
        defer_trace(session, pipeline, copies, notes)
        result = self._result(max(ends), [st.acc for st in pipeline.stages], mem, notes, traffic, passes, ends, copies)
        result.bubbles = [st.bubbles for st in pipeline.stages]
        return result

    # ---- pieces ----------------------------------------------------------------------------------------------
    def _dp_representatives(self, traffic: Traffic, notes: list) -> list[int]:
        dims = self.dims
        if dims.tp == 1 or dims.dp * dims.cp == 1:
            return [0]
        a = traffic.group_links(dims.ranks(pp=0, tp=0).reshape(-1))
        b = traffic.group_links(dims.ranks(pp=0, tp=1).reshape(-1))
        if a & b:
            notes.append("the TP ranks' data-parallel groups share links: all of them are simulated")
            return list(range(dims.tp))
        return [0]

    def _check_replay(self, traffic: Traffic, reps, notes: list) -> None:
        dims = self.dims
        inner, outer = frozenset(), frozenset()
        stage_ranks = [dims.ranks(pp=r, dp=0).reshape(-1) for r in range(dims.pp)]
        for r in range(dims.pp):
            grid = dims.ranks(pp=r, dp=0)  # (cp, tp)
            for row in grid:
                inner |= traffic.group_links(row)
            if dims.cp > 1:
                inner |= traffic.links_of_routes(grid.reshape(-1), np.roll(grid, -1, axis=0).reshape(-1))
            for t in reps:
                outer |= traffic.group_links(dims.ranks(pp=r, tp=t).reshape(-1))
            if r + 1 < dims.pp:
                outer |= traffic.links_of_routes(stage_ranks[r], stage_ranks[r + 1])
                outer |= traffic.links_of_routes(stage_ranks[r + 1], stage_ranks[r])
        if inner & outer:
            notes.append("TP/CP traffic shares links with DP or PP traffic here: layer templates are timed alone, "
                         "so their contention with gradient and pipeline transfers is not modelled")

    def _result(self, step_time, acc, mem, notes, traffic, passes, ends, copies) -> StepResult:
        L, cfg, dims = self.layout, self.cfg, self.dims
        model = L.model
        tokens = cfg.global_batch_size * model.seq_length
        title, per_token = FORMULAS[cfg.flops_formula]
        model_flops = per_token(model) * tokens
        recomputed = None
        if cfg.recompute_granularity == "full" and cfg.recompute_method == "block":
            n = cfg.recompute_num_layers or 0
            recomputed = sum(min(n, len(L.layers_of(r, c))) for r in range(dims.pp) for c in range(L.chunks))
        hw = model_flops + recompute_flops_per_token(model, cfg.recompute_granularity, recomputed) * tokens
        if traffic.stats["late_overlaps"]:
            notes.append(f"{traffic.stats['late_overlaps']} transfer(s) started on the links of a replayed "
                         "collective: neither was slowed by the other (an approximation)")
        if self.cm.note:
            notes.append(self.cm.note)
        per_stage = {r: {"forward_pass": sum(passes[(r, c, "F")].duration for c in range(L.chunks)),
                         "backward_pass": sum(passes[(r, c, "B")].duration for c in range(L.chunks))}
                     for r in range(dims.pp)}
        for r, a in enumerate(acc):
            total = sum(a.values())
            if abs(total - step_time) > 1e-9 * max(step_time, 1e-12) + 1e-12:
                raise SimcommError(f"internal: stage {r}'s breakdown adds up to {total} s, not the step's "
                                   f"{step_time} s")
        return StepResult(L, step_time, acc, mem, model_flops, hw, dims.world_size, self.cm.peak,
                          f"{cfg.flops_formula}: {title}", tokens, self.cluster.device.name, notes,
                          dict(traffic.stats), per_stage, list(ends), traffic.s.sim.interference, traffic.s.sim,
                          copies)


class _StepEnd:
    """The stages' processes, and what follows each one's schedule: waiting for its gradients (the data-parallel
    policy's end), the tied-embedding all-reduce between the first and last stage; then, once every stage is
    there, the gradient-norm all-reduce over the replica, the optimizer and the policy's after_optimizer."""

    def __init__(self, model: StepModel, pipeline: Pipeline, reps: list[int]):
        self.model, self.p, self.reps = model, pipeline, reps
        self.env = pipeline.env
        pp = model.dims.pp
        self.grads_done = [self.env.event() for _ in range(pp)]
        self.ready = [self.env.event() for _ in range(pp)]
        self.idle_from = [0.0] * pp
        self.ends = [None] * pp
        self.tied = pp > 1 and not model.layout.model.untie_embeddings_and_output_weights
        self._embedding = self._norm = None

    def simulate(self) -> list[float]:
        """Run the step; each stage's end (its optimizer and last gathers done)."""
        env, stages = self.env, self.p.stages
        procs = [env.process(self._stage(st)) for st in stages]
        for st in stages:
            self.ready[st.rank].callbacks.append(lambda _e, r=st.rank: self.idle_from.__setitem__(r, env.now))
        everyone = env.all_of(self.ready)
        opt = [env.process(self._optimizer(st, everyone)) for st in stages]
        self.p.session.run(env.all_of(opt))
        if not all(p.processed for p in procs):
            raise SimcommError("the pipeline did not finish (a schedule dependency was never met)")
        step_time = max(self.ends)
        for st in stages:
            st.idle(self.ends[st.rank], step_time - self.ends[st.rank])
        return self.ends

    def _stage(self, st: StageTiming):
        yield from st.schedule()
        env, r, pp = self.env, st.rank, self.model.dims.pp
        grads = self.p.dp.end(r)
        t = env.now
        if grads:
            yield env.all_of(grads)
        self.grads_done[r].succeed()
        st.acc["dp"] += env.now - t
        if self.tied and r in (0, pp - 1):
            t = env.now
            yield self.grads_done[pp - 1 - r if r else pp - 1]  # the other end of the embedding group
            st.idle(t, env.now - t)
            t = env.now
            yield self._embedding_all_reduce()
            st.acc["dp"] += env.now - t
        self.ready[r].succeed()

    def _embedding_all_reduce(self):
        """Tied embeddings: the first and last stage add their copies' gradients (Megatron's embedding group)."""
        if self._embedding is None:
            m, dims, cfg, pp = self.model.layout.model, self.model.dims, self.model.cfg, self.model.dims.pp
            size = m.padded_vocab_size * m.hidden_size / dims.tp * cfg.grad_bytes
            dtype = "float32" if cfg.grad_bytes == 4 else cfg.act_dtype
            pairs = [np.array([dims.ranks(pp=0, dp=0, cp=0, tp=t), dims.ranks(pp=pp - 1, dp=0, cp=0, tp=t)])
                     for t in self.reps]
            self._embedding = self.env.all_of([
                self.p.traffic.collective("all_reduce", g, size, dtype, after=[self.grads_done[0],
                                                                               self.grads_done[pp - 1]],
                                          tags={"axis": "dp", "phase": "embedding_grads"}) for g in pairs])
        return self._embedding

    def _optimizer(self, st: StageTiming, everyone):
        env, r = self.env, st.rank
        yield everyone
        t = env.now
        st.idle(self.idle_from[r], t - self.idle_from[r])
        if self._norm is None:
            replica = self.model.dims.ranks(dp=0).reshape(-1)
            self._norm = self.p.traffic.collective("all_reduce", replica, 4, "float32",
                                                   tags={"axis": "mp", "phase": "grad_norm"})
        yield self._norm
        st.acc["dp"] += env.now - t
        t, secs = env.now, optimizer_seconds(self.model.layout, r, self.model.cm)
        yield self.p.session.compute(st.ranks, seconds=secs, tags={"stage": r, "phase": "optimizer"},
                                     label="optimizer", kernels=OPTIMIZER_MIX)
        st.acc["optimizer"] += secs
        st.acc["interference"] += (env.now - t) - secs
        gathers = self.p.dp.after_optimizer(r)
        if gathers:
            t = env.now
            yield env.all_of(gathers)
            st.acc["dp"] += env.now - t
        self.ends[r] = env.now


__all__ = ["StepModel", "TemplateCache", "optimizer_seconds"]
