"""A layer's program, timed once on the simulated cluster and replayed wherever it recurs.

Every micro-batch runs the same layer program on every pipeline stage. Its kernels take the compute model's
seconds on the GPU's compute stream (Session.compute); its tensor- and context-parallel communication runs as
real collectives and sends on the stage's groups of the simulated cluster, beside or between the kernels as the
program says. The result, a Template, is the program's duration, what the compute stream did, the communication
it left exposed (per axis) and every segment's offsets, for the step to replay and the trace to draw.

Compute and communication share the GPU (engine/sharing.py): a kernel beside a TP collective slows as its shape
says, and the collective's copies slow beside it. With `tp_comm_overlap` the overlapped TP communication is
Transformer Engine's userbuffers, which hold their own SMs (USERBUFFERS_SMS). A template then also says how much
longer its kernels took than without that sharing (`interference`: beyond their seconds alone, which a run without
sharing adds up), and what its time is made of (`mix`: kernels and idle waits), so communication beside a replayed
layer slows it as its kernels would.

Replaying is exact when the groups' links carry nothing else while the layer runs, which holds when TP and CP
stay inside a node and DP and PP traffic leaves it (step_cost.py checks the links and says when it does not);
groups on other nodes of the same local layout behave identically (every node is a copy of one template). One Template
is made per distinct local layout of the stage's groups (nodes of a PCIe box are not symmetric inside).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Mapping

import numpy as np

from ..engine import Mix
from ..engine import sharing
from ..session import Session, as_dtype
from .model import programs as ops
from .model.moe.deepep import deepep_rows
from .model.programs import ATTENTION, GEMM, GROUPED_GEMM, Kernel, LayerComm, LayerStep

# Transformer Engine's userbuffers defaults (transformer_engine/pytorch/module/base.py, initialize_ub: "num_sm": 1
# for the ring-exchange all-gathers, which copy with the copy engines, else 16 with set_sm_margin): Megatron-LM's
# tp_comm_overlap passes no ub_cfgs, so these hold. Ring exchange: qkv/fc1 forward all-gathers and the
# proj/fc2 dgrad all-gathers; pipeline (proj, fc2 forward reduce-scatter) and bulk (qkv/fc1 dgrad and wgrad) 16.
USERBUFFERS_SMS = {"ring_exchange": 1, "pipeline": 16, "bulk": 16}


@dataclass(frozen=True)
class Segment:
    """One kernel or transfer of a template, with offsets from the template's start; a transfer keeps the kind
    and the tags the Session recorded it with (collective, algorithm, protocol, dtype, op, axis). `nbytes` is a
    transfer's bytes, a kernel's FLOPs."""

    stream: str  # compute | tp | cp
    start: float
    end: float
    name: str
    nbytes: float = 0.0
    kind: str = "compute"  # compute | collective | p2p
    tags: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class Template:
    name: str
    duration: float
    compute: float  # seconds the compute stream was busy
    exposed: dict[str, float]  # axis -> seconds the compute stream waited on that axis' communication
    flops: float  # formula FLOPs of its kernels on one GPU
    segments: tuple[Segment, ...] = field(repr=False, default=())
    interference: float = 0.0  # seconds the program took longer for compute and communication sharing the GPU
    mix: Mix | None = field(repr=False, default=None)  # what its time is made of: kernels and idle waits
    # the compute stream's time in order: ("compute", seconds) for kernels (as slowed), (axis, seconds) for a wait
    # on that axis' communication; they add up to `duration` (DualPipe's overlapped pair interleaves them)
    blocks: tuple[tuple[str, float], ...] = field(repr=False, default=())


def engine_kernel(cm, k: Kernel, seconds: float) -> sharing.Kernel:
    """The shape the engine slows `k` by (its grid, its share of HBM time)."""
    if k.kind == GEMM:
        return sharing.gemm_kernel(*k.shape, seconds=seconds, hbm_rate=cm.hbm)
    if k.kind == GROUPED_GEMM:  # as one GEMM over every expert's rows
        counts, n, kk, wgrad = k.shape
        rows = max(1, int(sum(counts)))
        return sharing.gemm_kernel(*((kk, n, rows) if wgrad else (rows, n, kk)), seconds=seconds, hbm_rate=cm.hbm)
    if k.kind == ATTENTION:
        return sharing.attention_kernel(k.shape[0], k.shape[1])
    return sharing.MEMORY_KERNEL


def userbuffers_sms(c: LayerComm) -> tuple[int, bool]:
    """(SMs, whether the GEMM beside is sized around them) of an overlapped TP collective under tp_comm_overlap:
    ring exchange for the all-gathers feeding a forward GEMM ("qkv.all_gather") or a row-parallel dgrad
    ("proj.grad_all_gather"), pipeline (forward reduce-scatters) or bulk (the column-parallel backward) else."""
    if c.collective == "all_gather" and c.name.endswith((".all_gather", ".grad_all_gather")):
        return USERBUFFERS_SMS["ring_exchange"], False
    return USERBUFFERS_SMS["pipeline" if c.name.endswith(".reduce_scatter") else "bulk"], True


class TemplateRunner:
    """Runs programs on a scratch Session of `cluster`, on the groups of `stage` (an array cp x tp of global
    ranks) and, for MoE layers, on `experts` ({'ep' | 'etp': the expert groups (rows of global ranks) with a rank in
    the stage}); `ideal`: communication costs nothing; `interference`: compute and communication share the GPUs
    (None: as the cluster's tuning says)."""

    def __init__(self, cluster, cm, stage: np.ndarray, dtype: str, ideal: bool = False, experts=None,
                 interference: bool | None = None):
        self.cluster = cluster
        self.interference = interference
        self.session = None
        self.cm = cm
        self.stage = np.asarray(stage, dtype=np.int64)
        self.ranks = self.stage.reshape(-1)
        self.dtype = dtype
        self.ideal = ideal
        self.experts = experts or {}

    def _expert_comm(self, c: LayerComm, out: list, t0: float):
        """An EP all-to-all (every rank sends per_peer[j] bytes to EP rank j; transposed when `back`) or an ETP
        all-gather / reduce-scatter, on every expert group of the stage at once."""
        s, itemsize = self.session, as_dtype(self.dtype)[0].itemsize
        ops, nbytes = [], c.nbytes
        for row in self.experts[c.axis]:
            if c.collective == "deepep":
                got, nbytes = self._deepep(c, np.asarray(row), itemsize)
                ops += got
            elif c.collective == "all_to_all":
                per = np.asarray(c.per_peer, dtype=np.float64) / itemsize
                splits = np.tile(per, (len(row), 1)).astype(np.int64)
                splits = splits.T.copy() if c.back else splits
                ops.append(s.collective("all_to_all", row, count=max(1, int(splits.max())), splits=splits,
                                        dtype=self.dtype, tags={"axis": c.axis}))
            else:
                ops.append(s.collective(c.collective, row, size=int(c.nbytes), dtype=self.dtype,
                                        tags={"axis": c.axis}))
        yield s.all_of(ops)
        out.append(Segment(c.axis, ops[0].start - t0, max(o.end for o in ops) - t0, c.name, nbytes, "collective",
                           ops[0].record.tags))

    def _deepep(self, c: LayerComm, row: np.ndarray, itemsize: int) -> tuple[list, float]:
        """DeepEP's exchange on EP group `row` (moe/deepep.py): an all-to-all over IB among each rail's GPUs (the
        same local index on every node of the group) beside an all-to-all over NVLink inside each node, both
        holding DeepEP's SMs; the transposed exchange when `back`. Returns the ops and the bytes the first GPU
        sends."""
        x, s = c.deepep, self.session
        nodes = row // self.cluster.ranks_per_node
        by_node = [row[nodes == n] for n in dict.fromkeys(nodes.tolist())]
        N, G = len(by_node), len(by_node[0])
        rdma, nvlink = deepep_rows(x.tokens, x.nodes_per_token(N), c.per_peer, G)
        elements = (x.combine_row if c.back else x.dispatch_row) / itemsize  # a row, in the exchange's dtype
        ops, sms = [], x.sms // 2 if N > 1 else x.sms  # DeepEP's channels: half its SMs per hop

        def run(ranks, rows, axis):
            splits = np.rint(np.outer(np.ones(len(ranks)), rows) * elements).astype(np.int64)
            np.fill_diagonal(splits, 0)  # nothing to itself
            splits = splits.T.copy() if c.back else splits
            if splits.any():
                ops.append(s.collective("all_to_all", ranks, count=max(1, int(splits.max())), splits=splits,
                                        dtype=self.dtype, tags={"axis": "ep", "path": axis}, sms=sms))
        if N > 1:
            for i in range(G):
                run(np.array([g[i] for g in by_node]), rdma, "rdma")
        for n, g in enumerate(by_node):
            run(g, nvlink[n], "nvlink")
        sent = (rdma.sum() - rdma[0]) * (N > 1) + nvlink[0].sum() - nvlink[0][0]
        return ops, float(sent * elements * itemsize)

    def _comm(self, c: LayerComm, out: list, t0: float, userbuffers: bool = False):
        s = self.session
        if c.axis in ("ep", "etp"):
            yield from self._expert_comm(c, out, t0)
            return
        if c.axis == "tp":
            sms, margin = userbuffers_sms(c) if userbuffers else (None, False)
            ops = [s.collective(c.collective, row, size=int(c.nbytes), dtype=self.dtype, tags={"axis": "tp"},
                                sms=sms, sm_margin=margin) for row in self.stage]
            yield s.all_of(ops)
            out.append(Segment("tp", ops[0].start - t0, max(o.end for o in ops) - t0, c.name, c.nbytes,
                               "collective", ops[0].record.tags))
            return
        src, dst = self.stage, np.roll(self.stage, -1, axis=0)  # each TP rank's ring over the CP ranks
        for i in range(c.steps):
            op = s.send(src.reshape(-1), dst.reshape(-1), c.nbytes, tags={"axis": "cp"})
            yield op
            out.append(Segment("cp", op.start - t0, op.end - t0, f"{c.name} step {i + 1}", c.nbytes, "p2p",
                               op.tags))

    def run(self, name: str, steps: list[LayerStep], userbuffers: bool = False) -> Template:
        """Time `steps`; userbuffers: TP communication beside compute is Transformer Engine's (tp_comm_overlap)."""
        tpl = self._run(name, steps, userbuffers, self.interference)
        if not self.session.sim.interference or self.ideal or not any(st.comm and st.compute for st in steps):
            return tpl  # nothing ran beside anything: the same without sharing
        # The kernels' time alone is the pass's forward/backward; what sharing added to them is interference; the
        # communication exposed is what the kernels waited for as they ran (what a profiler shows).
        alone = self._kernels_alone(steps)
        return replace(tpl, compute=alone, interference=tpl.compute - alone)

    def _kernels_alone(self, steps: list[LayerStep]) -> float:
        """The compute stream's busy seconds of `steps` run without sharing (what _run adds up then: each step's
        kernels back to back, their seconds alone), without running them."""
        busy = 0.0
        for st in steps:
            secs = [self.cm.kernel(k) for k in st.compute]
            if secs:
                busy += sum(secs)
        return busy

    def _run(self, name: str, steps: list[LayerStep], userbuffers: bool, interference: bool | None) -> Template:
        # A fresh simulation from time 0 for every program: its times then do not depend on what ran before
        # (float rounding of absolute clocks), so a template is the same whichever layout asks for it first.
        s = self.session = Session(self.cluster, detail="steps", interference=interference)
        segments: list[Segment] = []
        exposed: dict[str, float] = {}
        busy = [0.0]
        parts: list[tuple[float, sharing.Kernel]] = []  # (seconds, kernel) of what the time was spent on
        blocks: list[tuple[str, float]] = []

        def program():
            t0 = s.now
            for st in steps:
                start = s.now
                secs = [self.cm.kernel(k) for k in st.compute]
                shapes = [engine_kernel(self.cm, k, dt) for k, dt in zip(st.compute, secs)]
                waits, kernels = [], None
                if secs:
                    kernels = s.compute(self.ranks, seconds=sum(secs), kernels=list(zip(secs, shapes)),
                                        tags={"template": name})
                    waits.append(kernels)
                comm = [c for c in st.comm if not self.ideal]
                if comm:
                    def stream(cs=comm, beside=bool(secs)):
                        for c in cs:
                            yield from self._comm(c, segments, t0, userbuffers and beside)
                    waits.append(s.process(stream()))
                if waits:
                    yield s.all_of(waits)
                ran = 0.0
                if kernels is not None:  # each kernel's span, in proportion to its time alone
                    # (without sharing, exactly its time alone: the stream's clock would add rounding)
                    ran = kernels.end - kernels.start if s.sim.interference else sum(secs)
                    at, scale = start - t0, ran / sum(secs) if sum(secs) else 0.0
                    for k, dt, shape in zip(st.compute, secs, shapes):
                        segments.append(Segment("compute", at, at + dt * scale, k.name, k.flops))
                        parts.append((dt * scale, shape))
                        at += dt * scale
                    busy[0] += ran
                    blocks.append(("compute", ran))
                idle = (s.now - start) - ran
                if idle > 0:
                    parts.append((idle, sharing.IDLE_KERNEL))
                    if comm:
                        axis = comm[-1].axis
                        exposed[axis] = exposed.get(axis, 0.0) + idle
                        blocks.append((axis, idle))
                    else:
                        blocks.append(("compute", idle))
            return s.now - t0

        proc = s.process(program())
        s.run(proc)
        duration = proc.value
        flops = sum(k.flops for st in steps for k in st.compute)
        weights = [p[0] for p in parts]
        mix = Mix(weights, [p[1] for p in parts]) if sum(weights) > 0 else None
        return Template(name, duration, busy[0], exposed, flops, tuple(segments), 0.0, mix, tuple(blocks))


class TemplateCache:
    """Templates by (local layout of the stage, program): shared by the layouts a search evaluates.
    `interference`: as TemplateRunner's."""

    def __init__(self, cluster, interference: bool | None = None):
        self.cluster = cluster
        self.interference = interference
        self._runners: dict = {}
        self._done: dict = {}

    def site(self, stage: np.ndarray, experts=None) -> tuple:
        """Where a stage's ranks (and its expert groups) sit on their nodes: what its templates depend on besides
        the program, shape and precision."""
        rpn = self.cluster.ranks_per_node
        local = (tuple((stage % rpn).reshape(-1).tolist()), tuple((stage // rpn - stage.min() // rpn).reshape(-1)))
        if experts:  # where the expert groups sit, relative to the stage's first node
            first = stage.min() // rpn
            local += tuple((a, tuple(map(tuple, (g % rpn).tolist())), tuple(map(tuple, (g // rpn - first).tolist())))
                           for a, g in sorted(experts.items()))
        return local

    def get(self, cm, stage: np.ndarray, shape: ops.LayerShape, dtype: str, ideal: bool, name: str, experts=None,
            site: tuple | None = None) -> Template:
        """The template of program `name`; experts: the stage's EP and ETP groups (MoE layers); `site`: the
        stage's site(stage, experts), where the caller keeps it."""
        local = self.site(stage, experts) if site is None else site
        key = (local, shape, dtype, ideal, cm.key, name)
        got = self._done.get(key)
        if got is None:
            twin = TWINS[name]  # the same program under another name: its simulation, renamed
            got = self._run(local, cm, stage, shape, dtype, ideal, name, experts) if twin == name else \
                replace(self.get(cm, stage, shape, dtype, ideal, twin, experts, local), name=name)
            self._done[key] = got
        return got

    def _run(self, local, cm, stage, shape, dtype: str, ideal: bool, name: str, experts) -> Template:
        rk = (local, stage.shape, dtype, ideal, cm.key)
        runner = self._runners.get(rk)
        if runner is None:
            runner = self._runners[rk] = TemplateRunner(self.cluster, cm, stage, dtype, ideal, experts,
                                                        self.interference)
        return runner.run(name, PROGRAMS[name](shape), shape.tp_comm_overlap)


PROGRAMS = {"layer.forward": ops.layer_forward, "layer.backward": ops.layer_backward,
            "layer.recompute": ops.layer_forward, "layer.selective": ops.selective_recompute,
            "embedding.forward": ops.embedding_forward, "embedding.backward": ops.embedding_backward,
            "output.forward": ops.output_forward, "output.backward": ops.output_backward,
            **{f"{unit}.backward_{part}": partial(program, part=part)  # the backward split (zero-bubble I and W)
               for unit, program in (("layer", ops.layer_backward), ("embedding", ops.embedding_backward),
                                     ("output", ops.output_backward)) for part in ("input", "weight")}}
# a recomputation is the forward again: one simulation per program, whatever its name
TWINS = {name: next(n for n in PROGRAMS if PROGRAMS[n] is program) for name, program in PROGRAMS.items()}
