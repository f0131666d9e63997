"""Runs a plan on the engine: every step's flows on the network, reductions on HBM, steps in lockstep.

Steps are synchronous across the group: a step starts when the previous one has finished on every rank. For the
symmetric algorithms NCCL runs, the slowest link sets the pace of every step anyway, so this loses little and keeps
the event count at a few per step whatever the number of ranks.
"""
from __future__ import annotations

import numpy as np

from ..engine.resources import reduction_bytes
from .plan import Buffers, Collective, Plan
from .protocols import Protocol


def execute(sim, coll: Collective, plan: Plan, buffers: Buffers, proto: Protocol, label: str):
    """A simpy process body: run `plan` for `coll` on `sim`; returns the finish time."""
    cluster = sim.cluster
    ranks = coll.ranks
    rpn = cluster.ranks_per_node
    intra = cluster.intra_node[2]
    fused = cluster.device.fused_reduction
    start = sim.now
    if proto.base_latency > 0:
        yield sim.env.timeout(proto.base_latency)
    hop_intra, hop_net = proto.hop(intra), proto.hop("net")
    for st in plan(coll, buffers):
        t0 = sim.now
        if len(st.src):
            g_src, g_dst = ranks[st.src], ranks[st.dst]
            if st.routes is None:
                extra = np.where(g_src // rpn == g_dst // rpn, hop_intra, hop_net)
            else:
                extra = hop_intra
            tr = sim.network.transfer(g_src, g_dst, st.nbytes, label=f"{label} {st.label}".strip(),
                                      extra_latency=extra, wire_factor=proto.wire_factor, routes=st.routes)
            yield tr.done
        reducers = None
        if st.reduce and len(st.src):
            reducers = (ranks[st.dst], st.nbytes)
        if st.local_reduce is not None:
            lr, lb = st.local_reduce
            reducers = (ranks[lr], lb) if reducers is None else (
                np.concatenate([reducers[0], ranks[lr]]), np.concatenate([reducers[1], lb]))
        if reducers is not None:
            who, amount = reducers
            uniq, inv = np.unique(who, return_inverse=True)
            per_rank = np.bincount(inv, weights=reduction_bytes(amount))
            ends = sim.memory.use(uniq, per_rank, t0 if fused else sim.now, label=f"{label} reduce")
            last = float(ends.max())
            if last > sim.now:
                yield sim.at(last)
    sim.recorder.spans("collective", ranks, start, sim.now, coll.nbytes, label)
    return sim.now
