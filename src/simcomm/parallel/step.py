"""One training step of a layout, simulated on the cluster through the Session.

Who is simulated (symmetry, exact where contention allows): data-parallel replicas do identical work, so one
replica's pipeline is simulated (every stage, every TP and CP rank of it); the others appear only as the far ends
of its data-parallel collectives, which run over the full groups. Those groups are simulated for one TP rank
when the TP ranks' groups cross disjoint links (one NIC rail each, as on a rail-optimised fabric), else for all.
Layer programs (kernels, TP and CP communication) are timed once per distinct local layout (templates.py) and
replayed; repeated data-parallel collectives are replayed when their links are quiet (traffic.py).

The step: a simpy process per pipeline rank walks the schedule's actions (schedules.py). A forward (backward)
waits for its activation (gradient) from the neighbouring virtual stage, runs its pass on the compute stream
(Session.compute, tagged), and sends its output over the real network (blocking, as Megatron-LM's p2p is, unless
overlap_p2p_comm). Gradient buckets start their reduce-scatter (all-reduce without ZeRO) as the last micro-batch's
backward fills them (overlap_grad_reduce) or after the last backward, ZeRO-2's after every micro-batch's
backward (it keeps only its shard of the gradients, so they cannot accumulate); parameter all-gathers of the distributed
optimizer run at the step's start beside the first forwards (overlap_param_gather) or after the optimizer; ZeRO-3
gathers each layer's parameters before it in every forward and backward and reduce-scatters its gradients.
Then the tied-embedding all-reduce (first and last stage), a gradient-norm all-reduce over the replica, and the
optimizer (memory-bound Adam over the GPU's shard). ZeRO-3's gathers of a pass are issued in order at its start
on the data-parallel stream, so each runs as early as the stream allows. Not modelled: p2p rendezvous (a send starts when its data is
ready), data loading, the per-step host overheads.
"""
from __future__ import annotations

import numpy as np

from ..engine import IDLE_KERNEL, MEMORY_KERNEL, Mix
from ..engine.trace import Activity
from ..errors import SimcommError
from ..session import Session
from .compute_model import ComputeModel
from .model import layer_ops as ops
from .model.flops import FORMULAS, recompute_flops_per_token
from .model.memory import check_fits, stage_memory, stage_parameters
from .passes import Bucket, Pass, build_pass, buckets, default_bucket_size, layer_params_per_gpu
from .pipeline_parallel.schedules import FORWARD
from .step_result import CATEGORIES, StepResult
from .templates import TemplateRunner
from .traffic import Traffic

TRACE_BUDGET = 100_000  # layer-level trace records (per-layer blocks and their TP/CP transfers) at most
OPTIMIZER_MIX = Mix([1.0], [MEMORY_KERNEL])  # Adam: memory-bound


class TemplateCache:
    """Templates by (local layout of the stage, program): shared by the layouts a search evaluates."""

    def __init__(self, cluster):
        self.cluster = cluster
        self._runners: dict = {}
        self._done: dict = {}

    def get(self, cm, stage: np.ndarray, shape: ops.LayerShape, dtype: str, ideal: bool, name: str):
        rpn = self.cluster.ranks_per_node
        local = (tuple((stage % rpn).reshape(-1).tolist()), tuple((stage // rpn - stage.min() // rpn).reshape(-1)))
        key = (local, shape, dtype, ideal, cm.key, name)
        if key not in self._done:
            rk = (local, stage.shape, dtype, ideal, cm.key)
            runner = self._runners.get(rk)
            if runner is None:
                runner = self._runners[rk] = TemplateRunner(self.cluster, cm, stage, dtype, ideal)
            program = PROGRAMS[name](shape)
            self._done[key] = runner.run(name, program, shape.tp_comm_overlap)
        return self._done[key]


PROGRAMS = {"layer.forward": ops.layer_forward, "layer.backward": ops.layer_backward,
            "layer.recompute": ops.layer_forward, "layer.selective": ops.selective_recompute,
            "embedding.forward": ops.embedding_forward, "embedding.backward": ops.embedding_backward,
            "output.forward": ops.output_forward, "output.backward": ops.output_backward}


def optimizer_seconds(layout, rank: int, cm) -> float:
    """Adam over the GPU's shard at HBM rate: read master, moments and fp32 gradient, write master and moments
    (28 B/param, 24 without a master copy), cast to 16-bit parameters (6 B), the gradient norm (read the
    gradient) and zeroing the gradient buffer."""
    cfg, dims = layout.config, layout.dims
    n = sum(stage_parameters(layout, rank).values())
    shard = n / (dims.dp * dims.cp) if cfg.stage >= 1 else n
    adam = (28 if cfg.param_bytes < 4 else 24) + (6 if cfg.param_bytes < 4 else 0)
    zeroed = shard if cfg.stage >= 2 else n
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
        self._mixes: dict = {}
        c = self.cfg
        self.shape = ops.LayerShape(layout.model, self.dims.tp, self.dims.cp, c.sp, c.micro_batch_size,
                                    c.flash_attention, c.tp_comm_overlap, 4 if c.param_bytes == 4 else 2)

    # ---- memory ----------------------------------------------------------------------------------------------
    def memory(self) -> list:
        dev = self.cluster.device
        return [stage_memory(self.layout, r, dev.memory_capacity, self.cfg.fp8_format is not None)
                for r in range(self.dims.pp)]

    def build_passes(self) -> dict:
        """(pipeline rank, chunk, 'F' | 'B') -> Pass, from the layer templates (timed on the cluster once)."""
        L, cfg, dims = self.layout, self.cfg, self.dims
        tpls = [{name: self.templates.get(self.cm, dims.grid[r, 0], self.shape, cfg.act_dtype, cfg.ideal_network,
                                          name) for name in PROGRAMS} for r in range(dims.pp)]
        self.passes = {(r, c, ph): build_pass(L, r, c, ph, tpls[r]) for r in range(dims.pp)
                       for c in range(L.chunks) for ph in "FB"}
        return self.passes

    # ---- the step --------------------------------------------------------------------------------------------
    def run(self) -> StepResult:
        L, cfg, dims = self.layout, self.cfg, self.dims
        mem = self.memory()
        if self.check_memory:
            check_fits(mem, self.cluster.device.name)
        session = Session(self.cluster, detail=self.detail)
        traffic = Traffic(session, reuse=self.reuse, ideal=cfg.ideal_network)
        self.session, self.traffic = session, traffic
        env, pp, v = session.env, dims.pp, L.chunks
        stage_ranks = [dims.grid[r, 0].reshape(-1) for r in range(pp)]
        passes = self.build_passes()
        notes: list[str] = []
        reps = self._dp_representatives(traffic, notes)
        self._check_replay(traffic, stage_ranks, reps, notes)
        dp_groups = [[dims.grid[r, :, :, t].reshape(-1) for t in reps] for r in range(pp)]
        bsize = default_bucket_size(cfg, dims.dp * dims.cp)
        bks = {(r, c): buckets(passes[(r, c, "B")], bsize) for r in range(pp) for c in range(v)}
        act_bytes = self.shape.sp_tokens * L.model.hidden_size * self.shape.elem
        acc = [{k: 0.0 for k in CATEGORIES} for _ in range(pp)]
        arrivals: dict = {}
        instances: list = []
        ready_for_optimizer = [env.event() for _ in range(pp)]
        dp_last = [[None] * len(reps) for _ in range(pp)]  # the last op on each DP stream (they run in order)

        def dp_op(r, kind, nbytes_per_param, params, after, tags):
            out = []
            for i, group in enumerate(dp_groups[r]):
                deps = list(after) + ([dp_last[r][i]] if dp_last[r][i] is not None else [])
                op = traffic.collective(kind, group, params * nbytes_per_param, dtype_of(nbytes_per_param),
                                        after=deps, tags={"axis": "dp", "stage": r, **tags})
                dp_last[r][i] = op
                out.append(op)
            return out

        def dtype_of(nbytes):
            return "float32" if nbytes == 4 else cfg.act_dtype

        def arrival(key):
            if key not in arrivals:
                arrivals[key] = [env.event(), None]
            return arrivals[key]

        # parameter gathers of the distributed optimizer at the step's start, in forward order
        gathers: dict = {}
        if cfg.stage in (1, 2) and cfg.overlap_param_gather:
            for r in range(pp):
                for c in range(v):
                    for k, b in enumerate(reversed(bks[(r, c)])):
                        gathers[(r, c, b.layers)] = dp_op(r, "all_gather", cfg.param_bytes, b.params, [],
                                                          {"chunk": c, "bucket": k, "phase": "param_gather"})

        def wait_deps(r, deps):
            """Wait for the inputs of an action; split the wait into pipeline comm and bubble."""
            t_w = env.now
            pending = [d for d in deps if not d[0].processed]
            if pending:
                yield env.all_of([d[0] for d in pending])
            t_a = env.now
            if t_a > t_w:
                sent = max((d[1] for d in deps if d[1] is not None), default=t_a)
                comm = t_a - max(sent, t_w)
                acc[r]["pp"] += comm
                acc[r]["bubble"] += (t_a - t_w) - comm

        def run_pass(r, a, p: Pass, tags):
            """The pass on the compute stream, cut where a part must wait for its parameters."""
            cut = self._part_dependencies(r, a, p, gathers, dp_op)
            i, starts = 0, []
            while i < len(p.parts):
                dep = cut.get(i)
                if dep is not None:
                    t = env.now
                    yield env.all_of(dep)
                    acc[r]["dp"] += env.now - t
                j = i + 1
                while j < len(p.parts) and j not in cut:
                    j += 1
                secs = sum(x.template.duration for x in p.parts[i:j])
                t0 = env.now
                starts += [t0 + x.offset - p.parts[i].offset for x in p.parts[i:j]]
                yield session.compute(stage_ranks[r], seconds=secs, tags=tags, label=_label(a, tags),
                                      kernels=self._mix(p, i, j) if session.sim.interference else None)
                acc[r]["interference"] += (env.now - t0) - secs  # slowed by communication beside it
                if cfg.stage == 3 and a.phase != FORWARD:
                    for x, s in zip(p.parts[i:j], starts[i:j]):
                        if x.params:
                            dp_op(r, "reduce_scatter", cfg.grad_bytes, x.params, [session.sim.at(s +
                                  x.template.duration)], {"chunk": a.chunk, "layer": x.layer,
                                                          "phase": "grad_reduce_scatter"})
                i = j
            for k, v_ in p.breakdown.items():
                acc[r][k] += v_
            instances.append((r, a, p, starts))

        last_b = [{c: max(i for i, a in enumerate(L.schedule[r]) if a.phase != FORWARD and a.chunk == c)
                   for c in range(v)} for r in range(pp)]
        grad_kind = "reduce_scatter" if cfg.stage >= 1 else "all_reduce"

        def stage(r):
            last_vs = pp * v - 1
            grads = []
            for i, a in enumerate(L.schedule[r]):
                vs = a.chunk * pp + r
                deps = []
                if a.phase == FORWARD and vs > 0:
                    deps.append(arrival(("F", a.microbatch, vs)))
                if a.phase != FORWARD and vs < last_vs:
                    deps.append(arrival(("B", a.microbatch, vs)))
                yield from wait_deps(r, deps)
                p = passes[(r, a.chunk, "F" if a.phase == FORWARD else "B")]
                tags = {"stage": r, "microbatch": a.microbatch, "chunk": a.chunk,
                        "phase": "forward" if a.phase == FORWARD else "backward"}
                last = i == last_b[r][a.chunk]
                if a.phase != FORWARD and (cfg.stage < 3 and cfg.overlap_grad_reduce and last or
                                           cfg.stage == 2 and not last):
                    # each bucket as soon as its last gradient is ready (after the pass without overlap); ZeRO-2
                    # keeps only its shard of the gradients, so it reduce-scatters every micro-batch's
                    for k, b in enumerate(bks[(r, a.chunk)]):
                        at = env.now + (b.ready if cfg.overlap_grad_reduce else p.duration)
                        grads += dp_op(r, grad_kind, cfg.grad_bytes, b.params, [session.sim.at(at)],
                                       {"chunk": a.chunk, "bucket": k, "phase": "grad_reduce"})
                yield from run_pass(r, a, p, tags)
                nxt = vs + 1 if a.phase == FORWARD else vs - 1
                if 0 <= nxt <= last_vs:
                    key = ("F" if a.phase == FORWARD else "B", a.microbatch, nxt)
                    op = traffic.send(stage_ranks[r], stage_ranks[nxt % pp], act_bytes,
                                      tags={"axis": "pp", **tags})
                    slot = arrival(key)
                    slot[1] = env.now
                    op.callbacks.append(lambda _e, ev=slot[0]: ev.succeed())
                    if not cfg.overlap_p2p_comm:
                        t = env.now
                        yield op
                        acc[r]["pp"] += env.now - t
            if cfg.stage < 3 and not cfg.overlap_grad_reduce:
                for c in range(v):
                    for k, b in enumerate(bks[(r, c)]):
                        grads += dp_op(r, grad_kind, cfg.grad_bytes, b.params, [],
                                       {"chunk": c, "bucket": k, "phase": "grad_reduce"})
            if cfg.stage == 3:
                grads += [op for op in dp_last[r] if op is not None]
            t = env.now
            if grads:
                yield env.all_of(grads)
            grads_done[r].succeed()
            acc[r]["dp"] += env.now - t
            if tied and r in (0, pp - 1):
                t = env.now
                yield grads_done[pp - 1 - r if r else pp - 1]  # the other end of the embedding group
                acc[r]["bubble"] += env.now - t
                t = env.now
                yield embedding_allreduce()
                acc[r]["dp"] += env.now - t
            ready_for_optimizer[r].succeed()

        grads_done = [env.event() for _ in range(pp)]
        tied = pp > 1 and not L.model.untie_embeddings_and_output_weights
        embedding_op = []

        def embedding_allreduce():
            """Tied embeddings: the first and last stage add their copies' gradients (Megatron's embedding group)."""
            if not embedding_op:
                size = L.model.padded_vocab_size * L.model.hidden_size / dims.tp * cfg.grad_bytes
                pairs = [np.array([dims.grid[0, 0, 0, t], dims.grid[pp - 1, 0, 0, t]]) for t in reps]
                embedding_op.append(env.all_of([
                    traffic.collective("all_reduce", g, size, dtype_of(cfg.grad_bytes),
                                       after=[grads_done[0], grads_done[pp - 1]],
                                       tags={"axis": "dp", "phase": "embedding_grads"}) for g in pairs]))
            return embedding_op[0]

        procs = [env.process(stage(r)) for r in range(pp)]
        ends = [None] * pp

        def optimizer(r):
            yield ready_for_optimizer_all
            t = env.now
            acc[r]["bubble"] += t - stage_idle_from[r]
            yield from grad_norm()
            acc[r]["dp"] += env.now - t
            t, secs = env.now, optimizer_seconds(L, r, self.cm)
            yield session.compute(stage_ranks[r], seconds=secs, tags={"stage": r, "phase": "optimizer"},
                                  label="optimizer", kernels=OPTIMIZER_MIX)
            acc[r]["optimizer"] += secs
            acc[r]["interference"] += (env.now - t) - secs
            if cfg.stage in (1, 2) and not cfg.overlap_param_gather:
                t = env.now
                gl = []
                for c in range(v):
                    for k, b in enumerate(reversed(bks[(r, c)])):
                        gl += dp_op(r, "all_gather", cfg.param_bytes, b.params, [],
                                    {"chunk": c, "bucket": k, "phase": "param_gather"})
                yield env.all_of(gl)
                acc[r]["dp"] += env.now - t
            ends[r] = env.now

        norm_op = {}

        def grad_norm():
            if "op" not in norm_op:
                replica = dims.grid[:, 0].reshape(-1)
                norm_op["op"] = traffic.collective("all_reduce", replica, 4, "float32",
                                                   tags={"axis": "mp", "phase": "grad_norm"})
            yield norm_op["op"]

        stage_idle_from = [0.0] * pp

        def mark(r):
            def cb(_e):
                stage_idle_from[r] = env.now
            return cb
        for r in range(pp):
            ready_for_optimizer[r].callbacks.append(mark(r))
        ready_for_optimizer_all = env.all_of(ready_for_optimizer)
        opt = [env.process(optimizer(r)) for r in range(pp)]
        session.run(env.all_of(opt))
        for p_ in procs:
            if not p_.processed:
                raise SimcommError("the pipeline did not finish (a schedule dependency was never met)")
        step_time = max(ends)
        for r in range(pp):
            acc[r]["bubble"] += step_time - ends[r]
        self._defer_trace(session, instances, stage_ranks, notes)
        return self._result(step_time, acc, mem, notes, traffic, passes, ends)

    # ---- pieces ----------------------------------------------------------------------------------------------
    def _mix(self, p: Pass, i: int, j: int) -> Mix:
        """What parts i..j-1 of pass p are made of (their templates' kernels and idle waits), for the engine to
        slow them by the communication that runs beside them."""
        key = (id(p), i, j)
        got = self._mixes.get(key)
        if got is None:
            weights, kernels = [], []
            for x in p.parts[i:j]:
                mix = x.template.mix
                if mix is None:
                    weights.append(x.template.duration)
                    kernels.append(IDLE_KERNEL)
                else:
                    weights.extend((mix.weights * x.template.duration).tolist())
                    kernels.extend(mix.kernels)
            got = self._mixes[key] = Mix(weights, kernels) if sum(weights) > 0 else None
        return got

    def _part_dependencies(self, r, a, p: Pass, gathers, dp_op) -> dict[int, list]:
        """Part index -> events it must wait for: the distributed optimizer's parameter gathers before the first
        forward of each chunk, or ZeRO-3's per-layer gathers (issued one part ahead)."""
        cfg, L = self.cfg, self.layout
        cut: dict[int, list] = {}
        if cfg.stage in (1, 2) and gathers and a.phase == FORWARD and a.microbatch == 0:
            for (gr, gc, layers), evs in gathers.items():
                if gr == r and gc == a.chunk:
                    idx = min((i for i, x in enumerate(p.parts) if x.layer in layers), default=None)
                    if idx is not None:
                        cut.setdefault(idx, []).extend(evs)
        elif cfg.stage == 3:
            params = stage_parameters(L, r)
            prev = None
            for i, x in enumerate(p.parts):
                if x.phase == "recompute" and i + 1 < len(p.parts) and p.parts[i + 1].layer == x.layer:
                    n = 0.0  # the layer's backward right after shares this gather
                else:
                    n = params["embedding"] if x.layer == -1 else params["output"] if x.layer == -2 else \
                        layer_params_per_gpu(L.model, self.dims.tp)
                if n:
                    prev = dp_op(r, "all_gather", cfg.param_bytes, n, [],
                                 {"chunk": a.chunk, "layer": x.layer, "microbatch": a.microbatch,
                                  "phase": "param_gather"})
                    cut[i] = prev
                elif prev is not None:
                    cut.setdefault(i, prev)
        return cut

    def _dp_representatives(self, traffic: Traffic, notes: list) -> list[int]:
        dims = self.dims
        if dims.tp == 1 or dims.dp * dims.cp == 1:
            return [0]
        a = traffic.group_links(dims.grid[0, :, :, 0].reshape(-1))
        b = traffic.group_links(dims.grid[0, :, :, 1].reshape(-1))
        if a & b:
            notes.append("the TP ranks' data-parallel groups share links: all of them are simulated")
            return list(range(dims.tp))
        return [0]

    def _check_replay(self, traffic: Traffic, stage_ranks, reps, notes: list) -> None:
        dims = self.dims
        inner, outer = frozenset(), frozenset()
        for r in range(dims.pp):
            grid = dims.grid[r, 0]
            for row in grid:
                inner |= traffic.group_links(row)
            if dims.cp > 1:
                inner |= traffic.links_of_routes(grid.reshape(-1), np.roll(grid, -1, axis=0).reshape(-1))
            for t in reps:
                outer |= traffic.group_links(dims.grid[r, :, :, t].reshape(-1))
            if r + 1 < dims.pp:
                outer |= traffic.links_of_routes(stage_ranks[r], stage_ranks[r + 1])
                outer |= traffic.links_of_routes(stage_ranks[r + 1], stage_ranks[r])
        if inner & outer:
            notes.append("TP/CP traffic shares links with DP or PP traffic here: layer templates are timed alone, "
                         "so their contention with gradient and pipeline transfers is not modelled")

    def _defer_trace(self, session, instances, stage_ranks, notes: list) -> None:
        """Per-layer blocks and their TP/CP transfers, made only when the timeline is read: for every GPU of the
        replica when that stays within TRACE_BUDGET records, else for the first GPU of each stage, else none (the
        passes are recorded anyway)."""
        per_gpu = sum(len(p.parts) + sum(1 for x in p.parts for seg in x.template.segments if seg.stream != "compute")
                      for _r, _a, p, _s in instances)
        width = len(stage_ranks[0])
        if per_gpu * width <= TRACE_BUDGET:
            traced = stage_ranks
        elif per_gpu <= TRACE_BUDGET:
            traced = [s[:1] for s in stage_ranks]
        else:
            notes.append(f"the trace shows passes, not layers: {per_gpu:,} layer records per GPU would exceed "
                         f"{TRACE_BUDGET:,}")
            return

        def produce():
            out = []
            for r, a, p, starts in instances:
                phase = "forward" if a.phase == FORWARD else "backward"
                for part, t0 in zip(p.parts, starts):
                    tpl = part.template
                    name = "embedding" if part.layer == -1 else "output" if part.layer == -2 else f"L{part.layer}"
                    tags = {"stage": r, "microbatch": a.microbatch, "chunk": a.chunk, "layer": part.layer,
                            "phase": part.phase if part.phase == "recompute" else phase, "stream": "compute"}
                    label = f"{'F' if phase == 'forward' else 'R' if part.phase == 'recompute' else 'B'}" \
                            f"{a.microbatch} {name}"
                    for rank in traced[r].tolist():
                        out.append(Activity(rank, "compute", t0, t0 + tpl.duration, tpl.flops, label, tags=tags))
                        for seg in tpl.segments:
                            if seg.stream == "compute":
                                continue
                            st = {**tags, "axis": seg.stream, "stream": seg.stream, "collective":
                                  seg.collective, "algorithm": seg.algorithm, "protocol": seg.protocol,
                                  "dtype": self.cfg.act_dtype, "op": "sum",
                                  "group": f"{seg.stream} group of stage {r}"}
                            if seg.collective == "p2p":
                                st = {k: v for k, v in st.items() if k not in ("algorithm", "protocol")}
                            out.append(Activity(rank, "collective" if seg.collective != "p2p" else "p2p",
                                                t0 + seg.start, t0 + seg.end, seg.nbytes, seg.name, tags=st))
            return out
        session.sim.recorder.deferred(produce)

    def _result(self, step_time, acc, mem, notes, traffic, passes, ends) -> StepResult:
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
                          dict(traffic.stats), per_stage, list(ends), self.session.sim.interference)


def _label(a, tags) -> str:
    return f"{'F' if a.phase == FORWARD else 'B'}{a.microbatch}" + (f" chunk {a.chunk}" if a.chunk else "")


__all__ = ["Bucket", "StepModel", "TemplateCache", "optimizer_seconds"]
