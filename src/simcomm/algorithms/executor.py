"""Runs a plan on the engine: every step's flows on the network, reductions on HBM.

Two clocks keep this both faithful and cheap. Bandwidth: a step's flows share the links together and the next
step starts when the last byte of this one is sent (lockstep, a few events per step whatever the number of ranks).
Latency: each rank carries the time its data is really ready; a flow's data arrives at its sender's ready time plus
its transfer time plus its route and protocol latency. Latency thus accumulates along each rank's chain of
dependencies, as in NCCL's pipelined rings (latency counted per hop on a chunk's path), and the collective ends
when the last rank is ready.
"""
from __future__ import annotations

import numpy as np

from ..engine import NO_TAGS
from ..engine.resources import reduction_bytes
from .plan import Buffers, Collective, Plan
from .protocols import Protocol


def execute(sim, coll: Collective, plan: Plan, buffers: Buffers, proto: Protocol, label: str, tags=NO_TAGS):
    """A simpy process body: run `plan` for `coll` on `sim`; returns the finish time. The collective is recorded
    on each of its ranks with `tags`; its flows carry them too."""
    cluster = sim.cluster
    ranks = coll.ranks
    rpn = cluster.ranks_per_node
    intra = cluster.intra_node[2]
    fused = cluster.device.fused_reduction
    start = sim.now
    if proto.base_latency > 0:
        yield sim.env.timeout(proto.base_latency)  # launch and setup, before any byte moves
    ready = np.full((1, coll.n), float(sim.now))  # per (channel, group rank)
    flat_index: dict[int, tuple] = {}
    hop_intra, hop_net = proto.hop(intra), proto.hop("net")
    seen: dict[int, tuple] = {}  # plans reuse the same flow arrays step after step
    for st in plan(coll, buffers):
        t0 = sim.now
        if len(st.src):
            key = id(st.src)
            if key not in seen or seen[key][0] is not st.src:
                g_src, g_dst = ranks[st.src], ranks[st.dst]
                extra = hop_intra if st.routes is not None else np.where(g_src // rpn == g_dst // rpn, hop_intra,
                                                                          hop_net)
                seen[key] = (st.src, g_src, g_dst, extra)
            _, g_src, g_dst, extra = seen[key]
            tr = sim.network.transfer(g_src, g_dst, st.nbytes, label=f"{label} {st.label}".strip(),
                                      extra_latency=extra, wire_factor=proto.wire_factor, routes=st.routes,
                                      weight=st.weight, with_latency=False, tags=tags)
            yield tr.done
            cost = tr.finish - t0 + sim.network.latency_of(tr)
            ready = _chain(ready, st, cost, t0, flat_index)
            floor = t0 + float(cost.min())  # no receiver of this step is ready before this
        who, amount = _reductions(st)
        if who is not None and len(who):
            per_rank = np.bincount(who, weights=reduction_bytes(np.broadcast_to(amount, who.shape)),
                                   minlength=coll.n)
            uniq = np.flatnonzero(per_rank)
            per_rank = per_rank[uniq]
            if not len(uniq):  # nothing to reduce (empty chunks)
                continue
            # Fused kernels reduce while receiving; otherwise the reduction follows the data's arrival.
            ends = sim.memory.use(ranks[uniq], per_rank, t0, label=f"{label} reduce", tags=tags)
            if fused and len(st.src) and ends.max() <= floor:
                pass  # the reduction finished before any data it feeds could move on
            elif fused and st.chains is not None and len(st.src):
                # Only the chains this step fed wait for the reduction (their receivers, on their channels).
                hbm = np.full(coll.n, -np.inf)
                hbm[uniq] = ends
                _, fdst = flat_index[(id(st.chains), ready.shape[1])][1:]
                flat = ready.reshape(-1)
                flat[fdst] = np.maximum(flat[fdst], hbm[st.chains[2]])
            elif fused:
                ready[:, uniq] = np.maximum(ready[:, uniq], ends)
            else:
                ready[:, uniq] += per_rank / sim.memory.rate
            if ends.max() > sim.now:
                yield sim.at(float(ends.max()))
    end = max(float(ready.max()), sim.now)
    if end > sim.now:
        yield sim.at(end)
    sim.recorder.spans("collective", ranks, start, sim.now, coll.nbytes, label, tags)
    return sim.now


def _chain(ready: np.ndarray, st, cost: np.ndarray, t0: float, flat_index: dict) -> np.ndarray:
    """Advance the latency clock: each flow's data is ready at the receiver when its sender was ready (or the
    step began) plus the flow's cost (transfer time plus latency)."""
    if st.chains is None:
        arrival = np.maximum(ready[:, st.src].max(axis=0), t0) + cost
        latest = _max_by(st.dst, arrival, ready.shape[1])
        np.maximum(ready, latest, out=ready)
        return ready
    ch, src, dst, flow = st.chains
    channels = int(ch[-1]) + 1  # chains are listed channel by channel
    if channels > len(ready):
        ready = np.vstack([ready, np.repeat(ready.max(axis=0, keepdims=True), channels - len(ready), axis=0)])
    n = ready.shape[1]
    flat = ready.reshape(-1)
    key = (id(st.chains), n)  # plans reuse one chain set for many steps: index it once per collective
    idx = flat_index.get(key)
    if idx is None or idx[0] is not st.chains:
        idx = flat_index[key] = (st.chains, ch * n + src, ch * n + dst)
    _, fsrc, fdst = idx
    arrival = np.maximum(flat[fsrc], t0)
    arrival += cost[flow]
    # Each (channel, receiver) has one predecessor in a chain step, so plain assignment is the max.
    flat[fdst] = np.maximum(flat[fdst], arrival)
    return ready



def _max_by(keys: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """out[k] = max of values with that key (-inf where none); a sort instead of the slow ufunc.at."""
    out = np.full(size, -np.inf)
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    last = np.r_[k[1:] != k[:-1], True]
    if last.all():
        out[k] = v
    else:
        starts = np.r_[0, np.flatnonzero(last[:-1]) + 1]
        out[k[last]] = np.maximum.reduceat(v, starts)
    return out


def _reductions(st):
    """(group ranks that reduce this step, bytes each reduces) or (None, None)."""
    who, amount = None, None
    if st.reduce and len(st.src):
        who, amount = st.dst, (st.nbytes if st.weight is None else st.nbytes * st.weight)
    if st.local_reduce is not None:
        lr, lb = st.local_reduce
        who = lr if who is None else np.concatenate([who, lr])
        amount = lb if amount is None else np.concatenate([amount, lb])
    return who, amount
