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
there, the optimizer's small all-reduces (step_collectives: fp16's found-inf and the gradient norm, over the
world with the distributed optimizer, else over the model-parallel group; off: one over the replica), the
optimizer (memory-bound Adam over the GPU's shard), then what the policy still gathers. With sequence
parallelism each stage first all-reduces its norm gradients over TP (Megatron's finalize_model_grads). Not
modelled: data loading, the per-step host overheads.
"""
from __future__ import annotations

import numpy as np

from ..algorithms.plan import Collective
from ..algorithms.run import choice_for
from ..engine import MEMORY_KERNEL, Mix
from ..errors import SimcommError
from ..session import Session
from .compute_model import ComputeModel
from .data_parallel.timing import data_parallel_timing
from .expert_parallel.step_report import expert_groups, moe_breakdown
from .layer_timing import TemplateCache
from .model.flops import FORMULAS, recompute_flops_per_token
from .model.memory import check_fits, stage_memory, stage_parameters
from .pipeline_parallel.schedules import SCHEDULES
from .pipeline_parallel.timing import Pipeline, StageTiming, slowed
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
    params = stage_parameters(layout, rank)
    n, experts = sum(params.values()), params.get("experts", 0.0)
    # the routed experts' optimizer state is sharded over their expert-data-parallel group
    shard = (n - experts) / (dims.dp * dims.cp) + experts / dims.edp if layout.sharding.optimizer_state else n
    adam = (28 if cfg.param_bytes < 4 else 24) + (6 if cfg.param_bytes < 4 else 0)
    zeroed = shard if layout.sharding.gradients else n
    return cm.memory(shard * (adam + cfg.grad_bytes) + zeroed * cfg.grad_bytes, "elementwise")


class RankTemplates:
    """One pipeline rank's templates by program name (PROGRAMS; prefixed moe_, an MoE layer's), from the step's
    TemplateCache on the rank's first data-parallel replica: each timed when first read, so a pass's programs
    only (a template does not depend on which is timed first)."""

    def __init__(self, step: "StepModel", rank: int):
        self.step, self.rank = step, rank
        self.stage = step.dims.ranks(pp=rank, dp=0)
        self._got: dict = {}
        self._sites: dict = {}  # MoE layer or not -> (where its groups sit: TemplateCache.site, its expert groups)

    def _site(self, moe: bool) -> tuple:
        got = self._sites.get(moe)
        if got is None:
            experts = expert_groups(self.step.dims, self.rank) if moe else None
            got = self._sites[moe] = (self.step.templates.site(self.stage, experts), experts)
        return got

    @property
    def key(self) -> tuple:
        """What the rank's templates depend on: where its stage (and expert groups) sit, shapes, precision."""
        step, cfg = self.step, self.step.cfg
        moe = step.layout.model.is_moe
        return (self._site(False)[0], self._site(True)[0] if moe else None, step.shape, step.layout.moe_layer_shape,
                cfg.act_dtype, cfg.ideal_network, step.cm.key)

    def __getitem__(self, name: str):
        got = self._got.get(name)
        if got is None:
            step, cfg = self.step, self.step.cfg
            moe = name.startswith("moe_")
            site, experts = self._site(moe)
            got = self._got[name] = step.templates.get(
                step.cm, self.stage, step.layout.moe_layer_shape if moe else step.shape, cfg.act_dtype,
                cfg.ideal_network, name[4:] if moe else name, experts, site)
        return got


class StepModel:
    """Simulates one training step of `layout` on `cluster` (see the module docstring). `interference`: compute
    and communication share the GPUs (None: as the cluster's tuning says; `templates` must agree)."""

    def __init__(self, layout, cluster, *, detail: str = "steps", reuse: bool = True,
                 templates: TemplateCache | None = None, check_memory: bool = True,
                 interference: bool | None = None):
        self.layout, self.cluster = layout, cluster
        self.cfg, self.dims = layout.config, layout.dims
        if self.dims.world_size > cluster.num_ranks:
            raise SimcommError(f"the layout needs {self.dims.world_size} GPUs; {cluster.name} has "
                               f"{cluster.num_ranks}")
        self.cm = ComputeModel(cluster.device, self.cfg.precision, fp8=self.cfg.fp8_format is not None)
        self.detail, self.reuse = detail, reuse
        self.interference = interference
        self.templates = templates or TemplateCache(cluster, interference)
        self.check_memory = check_memory
        self.shape = layout.layer_shape

    @property
    def activation_bytes(self) -> float:
        """The bytes of one micro-batch's activation (or its gradient) between two pipeline stages."""
        return self.shape.sp_tokens * self.layout.model.hidden_size * self.shape.elem

    def memory(self) -> list:
        dev = self.cluster.device
        return [stage_memory(self.layout, r, dev.memory_capacity, self.cfg.fp8_format is not None)
                for r in range(self.dims.pp)]

    def build_passes(self) -> dict:
        """(pipeline rank, chunk, 'F' | 'B', and 'I' | 'W' where the schedule splits the backward) -> Pass, from
        the layer templates (timed on the cluster once)."""
        L, dims = self.layout, self.dims
        split = SCHEDULES[L.schedule_name].splits_backward
        tpls = [self.rank_templates(r) for r in range(dims.pp)]
        self.passes = {(r, c, ph): build_pass(L, r, c, ph, tpls[r]) for r in range(dims.pp)
                       for c in range(L.chunks) for ph in ("FBIW" if split else "FB")}
        return self.passes

    def rank_templates(self, rank: int) -> "RankTemplates":
        """Pipeline rank `rank`'s layer templates by program name, each timed when a pass first reads it."""
        return RankTemplates(self, rank)

    # ---- the step --------------------------------------------------------------------------------------------
    def run(self) -> StepResult:
        mem = self.memory()
        if self.check_memory:
            check_fits(mem, self.cluster.device.name)
        session = Session(self.cluster, detail=self.detail, interference=self.interference)
        traffic = Traffic(session, reuse=self.reuse, ideal=self.cfg.ideal_network)
        passes = self.build_passes()
        notes: list[str] = []
        reps = self._dp_representatives(traffic, notes)
        self._check_replay(traffic, reps, notes)
        dp = data_parallel_timing(self.layout, traffic, passes, reps)
        dp.start()
        pipeline = Pipeline(self.layout, session, traffic, passes, dp, self.activation_bytes)
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
        inner, outer = set(), set()  # grown in place: a frozenset's |= copies the whole set each time
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
        if not inner.isdisjoint(outer):
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
        hw = model_flops + recompute_flops_per_token(model, cfg.recompute_granularity, recomputed,
                                                     modules=self.shape.recompute_modules) * tokens
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
                          moe_breakdown(self, acc) if L.model.is_moe else {}, copies)


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
        layout = model.layout
        # Megatron's embedding group: the first and last stage on two ranks (in a V, or DualPipe after its two
        # copies of each stage are summed, one rank holds both ends and adds them in place)
        self.tied = pp > 1 and not layout.model.untie_embeddings_and_output_weights and \
            layout.placement.style == "loop"
        self.mirrored = layout.placement.style == "dual"
        self._embedding = self._norm = None
        self._mirror: dict = {}

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
        norms = self._sequence_parallel_grads(r)
        if norms:
            t = env.now
            yield env.all_of(norms)
            st.acc["tp"] += env.now - t
        if self.mirrored:
            t = env.now
            yield self.grads_done[pp - 1 - r]
            st.idle(t, env.now - t)
            t = env.now
            yield self._mirror_all_reduce(min(r, pp - 1 - r))
            st.acc["pp"] += env.now - t
        if self.tied and r in (0, pp - 1):
            t = env.now
            yield self.grads_done[pp - 1 - r if r else pp - 1]  # the other end of the embedding group
            st.idle(t, env.now - t)
            t = env.now
            yield self._embedding_all_reduce()
            st.acc["dp"] += env.now - t
        self.ready[r].succeed()

    def _sequence_parallel_grads(self, r: int) -> list:
        """Megatron's finalize_model_grads with sequence parallelism: the gradients of the parameters every TP rank
        holds whole (norms; row-parallel biases) summed over TP, one coalesced all-reduce per TP group."""
        layout, dims, cfg = self.model.layout, self.model.dims, self.model.cfg
        if not (cfg.step_collectives and cfg.sp):
            return []
        m = layout.model
        norm = m.hidden_size * (2 if m.normalization == "LayerNorm" else 1)
        per_layer = 2 * norm + (2 * m.hidden_size if m.add_bias_linear else 0)
        layers = sum(len(layout.layers_of(r, c)) for c in range(layout.chunks))
        n = layers * per_layer + (norm if r == dims.pp - 1 else 0)
        dtype = "float32" if cfg.grad_bytes == 4 else cfg.act_dtype
        return [self.p.traffic.collective("all_reduce", dims.ranks(pp=r, dp=0, cp=c).reshape(-1), n * cfg.grad_bytes,
                                          dtype, tags={"axis": "tp", "stage": r, "phase": "sp_norm_grads"})
                for c in range(dims.cp)]

    def _optimizer_collectives(self):
        """The optimizer's small all-reduces, one after the other: fp16's found-inf (max), the gradient norm (sum
        of squares); over every GPU holding a piece of the gradients: the world with the distributed optimizer
        (each DP rank a shard), else the model-parallel group (tp x pp x cp). step_collectives off: one 4-byte
        all-reduce over the replica. A world-wide one takes the time NCCL's tuner model gives the algorithm it
        would run (tuner.predict: within 4% of the simulated tree at 16,384 GPUs; a latency-bound 4 bytes neither
        contends nor is contended), as simulating every rank's tree would cost seconds of wall time per step."""
        dims, cfg, env = self.model.dims, self.model.cfg, self.env
        replica = dims.ranks(dp=0).reshape(-1)
        if not cfg.step_collectives:
            return self.p.traffic.collective("all_reduce", replica, 4, "float32",
                                             tags={"axis": "mp", "phase": "grad_norm"})
        names = (["found_inf"] if cfg.fp16 else []) + ["grad_norm"]
        if not (self.model.layout.sharding.optimizer_state and dims.dp > 1):
            def chain():
                for name in names:
                    yield self.p.traffic.collective("all_reduce", replica, 4, "float32",
                                                    tags={"axis": "mp", "phase": name})
            return env.process(chain())
        world = dims.grid.reshape(-1)
        session = self.p.session
        choice = choice_for(session.sim, Collective("all_reduce", world, 1), None, None)
        recorder = session.sim.recorder

        def world_chain():
            for name in names:
                t0 = env.now
                yield env.timeout(0.0 if cfg.ideal_network else choice.predicted)
                recorder.spans("collective", world, t0, env.now, 4, f"all_reduce {choice.algorithm}/{choice.protocol}",
                               {"collective": "all_reduce", "algorithm": choice.algorithm,
                                "protocol": choice.protocol, "axis": "world", "phase": name})
        return env.process(world_chain())

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

    def _mirror_all_reduce(self, r: int):
        """DualPipe: pipeline ranks r and p - 1 - r hold the same two stages; they add their gradients (the
        shards they hold after the data-parallel reduction under ZeRO-2/3)."""
        if r not in self._mirror:
            layout, dims, cfg, pp = self.model.layout, self.model.dims, self.model.cfg, self.model.dims.pp
            size = sum(stage_parameters(layout, r).values()) * cfg.grad_bytes
            if layout.sharding.gradients:
                size /= layout.data_parallel_shards
            dtype = "float32" if cfg.grad_bytes == 4 else cfg.act_dtype
            pairs = [np.array([dims.ranks(pp=r, dp=0, cp=0, tp=t), dims.ranks(pp=pp - 1 - r, dp=0, cp=0, tp=t)])
                     for t in self.reps]
            self._mirror[r] = self.env.all_of([
                self.p.traffic.collective("all_reduce", g, size, dtype,
                                          after=[self.grads_done[r], self.grads_done[pp - 1 - r]],
                                          tags={"axis": "pp", "phase": "mirror_grads"}) for g in pairs])
        return self._mirror[r]

    def _optimizer(self, st: StageTiming, everyone):
        env, r = self.env, st.rank
        yield everyone
        t = env.now
        st.idle(self.idle_from[r], t - self.idle_from[r])
        if self._norm is None:
            self._norm = self._optimizer_collectives()
        yield self._norm
        st.acc["dp"] += env.now - t
        t, secs = env.now, optimizer_seconds(self.model.layout, r, self.model.cm)
        yield self.p.session.compute(st.ranks, seconds=secs, tags={"stage": r, "phase": "optimizer"},
                                     label="optimizer", kernels=OPTIMIZER_MIX)
        st.acc["optimizer"] += secs
        st.acc["interference"] += slowed(env.now - t, secs)
        gathers = self.p.dp.after_optimizer(r)
        if gathers:
            t = env.now
            yield env.all_of(gathers)
            st.acc["dp"] += env.now - t
        self.ends[r] = env.now


__all__ = ["StepModel", "TemplateCache", "optimizer_seconds"]
