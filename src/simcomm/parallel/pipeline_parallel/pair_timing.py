"""A pipeline rank's overlapped pairs in the step model (overlapped_pair.py says how a pair is timed).

DualPipe's (and DualPipeV's) F&B pairs interleave when overlap_moe_expert_parallel_comm is on (their default) and
either pass waits on the experts' exchanges; otherwise a pair runs as its forward, then its backward, as before.
An interleaved pair waits for both its inputs, then runs as one job on the compute stream (so communication
beside it -- gradient reductions, pipeline sends -- slows it as its kernels would), sends both outputs after it
(DeepSeek's DualPipe sends a pair's outputs once both chunks are done), and adds to the stage's breakdown what
its two passes' kernels took alone (forward, backward, recompute, TP and CP exposed, interference inside the
layers), the compute stream's waits on the exchanges (ep) and how much longer the kernels ran beside the other
chain's exchanges (interference). Its passes appear in the trace where their layers ran inside the pair.
"""
from __future__ import annotations

import numpy as np

from ...algorithms.channels import communicator_channels
from ...engine import IDLE_KERNEL, Mix
from .actions import Overlap, computations
from .overlapped_pair import PairProgress, chain, has_exchanges, kernel_factor, overlap_pair, pair_bound, slowed

PAIR_SCHEDULES = ("dualpipe", "dualpipev")  # whose F&B pairs are the overlap


def overlaps_pairs(layout) -> bool:
    """Whether the layout's overlapped pairs interleave their passes (overlap_moe_expert_parallel_comm; default
    on for DualPipe and DualPipeV)."""
    on = layout.config.overlap_moe_expert_parallel_comm
    return layout.schedule_name in PAIR_SCHEDULES and (on is None or on)


def exchange_sms(layout, cluster) -> tuple[int, int]:
    """(SMs an MoE exchange holds, SMs the kernels beside it are sized around): DeepEP's moe_deepep_num_sms, which
    DeepGEMM's kernels leave free (set_num_sms); NCCL's channels for the alltoall dispatcher, beside kernels sized
    for every SM."""
    cfg = layout.config
    if cfg.moe_token_dispatcher_type == "flex":
        return cfg.moe_deepep_num_sms, cfg.moe_deepep_num_sms
    dims = layout.dims
    group = dims.group_of(int(dims.ranks(pp=0, dp=0).reshape(-1)[0]), "ep")
    return communicator_channels(cluster, len(set((group // cluster.ranks_per_node).tolist()))), 0


def timed_schedule(layout, passes):
    """(schedule, duration(rank, action)) for pipeline_parallel/timeline.py as the step runs it: each pair that
    interleaves one action (a lower bound of its time: overlapped_pair.pair_bound), every other pair its forward,
    then its backward; a pass its duration."""
    sched = [[y for a in acts for y in ((a,) if isinstance(a, Overlap) and interleaves(layout, passes, r, a) else
                                        computations((a,)))]
             if any(isinstance(a, Overlap) for a in acts) else acts for r, acts in enumerate(layout.schedule)]

    def duration(r: int, a) -> float:
        if isinstance(a, Overlap):
            return pair_bound(*(chain(passes[(r, x.chunk, x.phase)], _alone) for x in a.parts))
        return passes[(r, a.chunk, a.phase)].duration
    return sched, duration


def interleaves(layout, passes, rank: int, pair: Overlap) -> bool:
    """Whether overlapped pair `pair` of pipeline rank `rank` interleaves its passes (the module docstring)."""
    return overlaps_pairs(layout) and any(has_exchanges(passes[(rank, x.chunk, x.phase)]) for x in pair.parts)


def _alone(_template) -> float:
    return 1.0


class OverlappedPairs:
    """The overlapped pairs of one StageTiming's schedule (see the module docstring)."""

    def __init__(self, stage, acts):
        self.stage = stage
        self.first: set[int] = set()  # index (in the flattened actions) of each interleaved pair's forward
        i = 0
        for a in acts:
            if isinstance(a, Overlap) and interleaves(stage.p.layout, stage.p.passes, stage.rank, a):
                self.first.add(i)
            i += 2 if isinstance(a, Overlap) else 1
        self._timings: dict = {}

    def pass_of(self, a):
        return self.stage.p.passes[(self.stage.rank, a.chunk, a.phase)]

    def together(self, i: int) -> bool:
        return i in self.first

    def ran(self, i: int) -> bool:
        """Action i is the backward of a pair that already ran."""
        return i - 1 in self.first

    def timing(self, pf, pb):
        key = (id(pf), id(pb))
        got = self._timings.get(key)
        if got is None:
            st = self.stage
            sim = st.session.sim
            held, margin = exchange_sms(st.p.layout, st.session.cluster) if sim.interference else (0, 0)
            factor = kernel_factor(held, margin, sim.compute.sms, sim.compute.hbm)
            got = self._timings[key] = overlap_pair(chain(pf, factor), chain(pb, factor))
        return got

    def run(self, fa, ba):
        """Run forward `fa` and backward `ba` as one interleaved pair (a simpy process body)."""
        st = self.stage
        env, dp = st.env, st.p.dp
        pf, pb = self.pass_of(fa), self.pass_of(ba)
        for a, p in ((fa, pf), (ba, pb)):  # parameters a pass waits for: all before the pair
            for dep in dp.before_pass(st.rank, a, p).values():
                deps = dep() if callable(dep) else dep
                if deps:
                    t = env.now
                    yield env.all_of(deps)
                    st.acc["dp"] += env.now - t
        pt = self.timing(pf, pb)
        t0 = env.now
        op = st.session.compute(st.ranks, seconds=pt.duration, tags={**st.tags(fa), "phase": "F&B",
                                                                      "annotation": "pass"},
                                label=f"{fa.phase}{fa.microbatch}&{ba.phase}{ba.microbatch}",
                                kernels=self._mix(pf, pb, pt) if st.session.sim.interference else None)
        yield op
        took = env.now - t0
        st.acc["interference"] += slowed(took, pt.duration) + pt.slowed
        st.acc["ep"] += pt.idle
        for p in (pf, pb):  # their kernels (and the waits on TP and CP inside their layers); ep is the pair's
            for k, v in p.breakdown.items():
                if k != "ep":
                    st.acc[k] += v
        scale = took / pt.duration if pt.duration > 0 else 1.0
        for a, p, (xs, ys) in ((fa, pf, pt.maps[0]), (ba, pb, pt.maps[1])):
            st.p.instances.append((st.rank, a, p, [(0, len(p.parts), PairProgress(op.progress, xs, ys))]))
            if st.after_part is not None:
                ends = np.interp([x.offset + x.template.duration for x in p.parts], xs, ys)
                for x, end in zip(p.parts, ends.tolist()):
                    st.after_part(st.rank, a, x, t0 + end * scale)

    def _mix(self, pf, pb, pt) -> Mix | None:
        """What the pair's job is made of: both passes' kernels, and the waits on exchanges left (idle)."""
        mixes = [m for m in (self.stage.p.mix(pf, 0, len(pf.parts)), self.stage.p.mix(pb, 0, len(pb.parts))) if m]
        weights, kernels = [], []
        for p, m in zip((pf, pb), mixes):
            for w, k in zip(m.weights, m.kernels):
                if k != IDLE_KERNEL:
                    weights.append(w * p.duration)
                    kernels.append(k)
        busy = sum(weights)
        if pt.idle > 0:
            weights.append(pt.idle)
            kernels.append(IDLE_KERNEL)
        return Mix(weights, kernels) if busy > 0 or pt.idle > 0 else None


__all__ = ["PAIR_SCHEDULES", "OverlappedPairs", "exchange_sms", "overlaps_pairs", "timed_schedule"]
