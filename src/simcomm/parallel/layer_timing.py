"""A layer's program, timed once on the simulated cluster and replayed wherever it recurs.

Every micro-batch runs the same layer program on every pipeline stage. Its kernels take the compute model's
seconds on the GPU's compute stream (Session.compute); its tensor- and context-parallel communication runs as
real collectives and sends on the stage's groups of the simulated cluster, beside or between the kernels as the
program says. The result, a Template, is the program's duration, what the compute stream did, the communication
it left exposed (per axis) and every segment's offsets, for the step to replay and the trace to draw.

Replaying is exact when the groups' links carry nothing else while the layer runs, which holds when TP and CP
stay inside a node and DP and PP traffic leaves it (step_cost.py checks the links and says when it does not);
groups on other nodes of the same local layout behave identically (every node is a copy of one template). One Template
is made per distinct local layout of the stage's groups (nodes of a PCIe box are not symmetric inside).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..session import Session
from .model import programs as ops
from .model.programs import LayerComm, LayerStep


@dataclass(frozen=True)
class Segment:
    """One kernel or transfer of a template, with offsets from the template's start; a transfer keeps the kind
    and the tags the Session recorded it with (collective, algorithm, protocol, dtype, op, axis)."""

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


class TemplateRunner:
    """Runs programs on a scratch Session of `cluster`, on the groups of `stage` (an array cp x tp of global
    ranks); `ideal`: communication costs nothing."""

    def __init__(self, cluster, cm, stage: np.ndarray, dtype: str, ideal: bool = False):
        self.cluster = cluster
        self.session = None
        self.cm = cm
        self.stage = np.asarray(stage, dtype=np.int64)
        self.ranks = self.stage.reshape(-1)
        self.dtype = dtype
        self.ideal = ideal

    def _comm(self, c: LayerComm, out: list, t0: float):
        s = self.session
        if c.axis == "tp":
            ops = [s.collective(c.collective, row, size=int(c.nbytes), dtype=self.dtype, tags={"axis": "tp"})
                   for row in self.stage]
            yield s.all_of(ops)
            out.append(Segment("tp", ops[0].start - t0, max(o.end for o in ops) - t0, c.name, c.nbytes,
                               "collective", ops[0].record.tags))
            return
        src, dst = self.stage, np.roll(self.stage, -1, axis=0)  # each TP rank's ring over the CP ranks
        for i in range(c.steps):
            op = s.send(src.reshape(-1), dst.reshape(-1), c.nbytes, tags={"axis": "cp"})
            yield op
            out.append(Segment("cp", op.start - t0, op.end - t0, f"{c.name} step {i + 1}", c.nbytes, "p2p", op.tags))

    def run(self, name: str, steps: list[LayerStep]) -> Template:
        # A fresh simulation from time 0 for every program: its times then do not depend on what ran before
        # (float rounding of absolute clocks), so a template is the same whichever layout asks for it first.
        s = self.session = Session(self.cluster, detail="steps")
        segments: list[Segment] = []
        exposed: dict[str, float] = {}
        busy = [0.0]

        def program():
            t0 = s.now
            for st in steps:
                start = s.now
                secs = [self.cm.kernel(k) for k in st.compute]
                waits = []
                if secs:
                    waits.append(s.compute(self.ranks, seconds=sum(secs), tags={"template": name}))
                    at = start - t0
                    for k, dt in zip(st.compute, secs):
                        segments.append(Segment("compute", at, at + dt, k.name))
                        at += dt
                    busy[0] += sum(secs)
                comm = [c for c in st.comm if not self.ideal]
                if comm:
                    def stream(cs=comm):
                        for c in cs:
                            yield from self._comm(c, segments, t0)
                    waits.append(s.process(stream()))
                if waits:
                    yield s.all_of(waits)
                idle = (s.now - start) - sum(secs)
                if idle > 0 and comm:
                    axis = comm[-1].axis
                    exposed[axis] = exposed.get(axis, 0.0) + idle
            return s.now - t0

        proc = s.process(program())
        s.run(proc)
        duration = proc.value
        flops = sum(k.flops for st in steps for k in st.compute)
        return Template(name, duration, busy[0], exposed, flops, tuple(segments))


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
            self._done[key] = runner.run(name, program)
        return self._done[key]


PROGRAMS = {"layer.forward": ops.layer_forward, "layer.backward": ops.layer_backward,
            "layer.recompute": ops.layer_forward, "layer.selective": ops.selective_recompute,
            "embedding.forward": ops.embedding_forward, "embedding.backward": ops.embedding_backward,
            "output.forward": ops.output_forward, "output.backward": ops.output_backward}
