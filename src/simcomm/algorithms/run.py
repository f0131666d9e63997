"""One entry point that runs a collective on a simulation: choose (or take) the algorithm, place the collective on
the cluster, prepare the data, execute the plan."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import AlgorithmError
from ..vocab import REDUCING
from . import gloo
from .catalog import ALGORITHMS
from .channels import collective_channels
from .executor import execute
from .plan import Buffers, Collective
from .protocols import protocol_for
from .reduce_ops import check_op, finish, prepare, prepares
from .tuner import Choice, choose


def _gloo_plan(coll: Collective, default):
    """gloo's own ring for the reductions, bitwise (its segments, ring order and combine)."""
    if coll.kind == "reduce_scatter":
        return gloo.gloo_reduce_scatter_list if coll.variant == "list" else gloo.gloo_reduce_scatter
    return {"all_reduce": gloo.gloo_all_reduce, "reduce": gloo.gloo_reduce}.get(coll.kind, default)


def choice_for(sim, coll: Collective, algorithm, protocol) -> Choice:
    """choose() with the channels its kernel holds, remembered for the run: it depends only on the cluster and
    the collective, and a training step repeats the same collectives thousands of times."""
    if coll.op.factor is not None:
        return _with_channels(sim.cluster, coll, choose(sim.cluster, coll, algorithm, protocol))
    key = (coll.kind, coll.ranks.tobytes(), coll.count, coll.dtype.str, coll.op.name, coll.root,
           None if coll.splits is None else (np.shape(coll.splits), np.asarray(coll.splits).tobytes()), coll.variant,
           algorithm, protocol)
    memo = sim.memo.setdefault("choices", {})
    if key not in memo:
        memo[key] = _with_channels(sim.cluster, coll, choose(sim.cluster, coll, algorithm, protocol))
    return memo[key]


def _with_channels(cluster, coll: Collective, choice: Choice) -> Choice:
    return replace(choice, channels=collective_channels(cluster, coll, choice.algorithm, choice.protocol))


def run_collective(sim, coll: Collective, rows: Buffers | np.ndarray | None = None, algorithm: str | None = None,
                   protocol: str | None = None, numerics: str = "nccl", label: str | None = None, tags=None,
                   sms: int | None = None, sm_margin: bool = False):
    """Start `coll` on `sim` now; returns (simpy process, buffers, Choice).

    The collective is recorded with structured tags: what it is (collective, algorithm, protocol, dtype, op) and
    whatever the caller adds in `tags` (group, stage, microbatch, ...).

    rows: the group's data (one row per group rank, layout per collective, see Collective) or None for
    size-only. numerics: "nccl" (each algorithm's natural order, float AVG pre-multiplied) or "gloo" (gloo's
    ring order for all_reduce, AVG = sum then divide, no PREMUL_SUM). sms: the SMs its kernel holds on every GPU
    instead of NCCL's channels (a library of its own, such as Transformer Engine's userbuffers); sm_margin: compute
    launched beside it knows (is sized for the SMs left).
    """
    if numerics not in ("nccl", "gloo"):
        raise AlgorithmError(f"numerics must be 'nccl' or 'gloo', got {numerics!r}")
    if coll.kind in REDUCING:
        check_op(coll.op, coll.dtype, "gloo" if numerics == "gloo" else "nccl")
    cluster = sim.cluster
    coll = coll.placed(cluster)
    choice: Choice = choice_for(sim, coll, algorithm, protocol)
    coll = replace(coll, placement=replace(coll.placement, protocol=choice.protocol))
    alg = ALGORITHMS[coll.kind][choice.algorithm]
    plan = alg.plans[coll.kind]
    alone = alg.alone.get(coll.kind)
    if numerics == "gloo" and algorithm in (None, "ring"):
        plan, alone = _gloo_plan(coll, plan), None
    buf = rows if isinstance(rows, Buffers) else Buffers(rows, coll.op)
    premul = numerics == "nccl"
    reducing = coll.kind in REDUCING
    if buf.live and reducing and prepares(coll.op, coll.dtype, premul):
        buf.rows[...] = prepare(coll.op, buf.rows, coll.n, premul)
    proto = protocol_for(choice.protocol, alg.family, cluster, coll)
    op = {"PRODUCT": "prod"}.get(coll.op.name, coll.op.name.lower())
    name = label or f"{coll.kind} {choice.algorithm}/{proto.name}"
    tags = {"collective": coll.kind, "dtype": coll.dtype.name, "op": op, **(tags or {}),
            "algorithm": choice.algorithm, "protocol": choice.protocol}

    if sms is not None:
        choice = replace(choice, channels=int(sms))

    def body():
        release = sim.compute.hold(coll.ranks, choice.channels, sm_margin)  # its CTAs, on each GPU, until it ends
        end = yield from execute(sim, coll, plan, buf, proto, name, tags, alone)
        if release is not None:
            release()
        if buf.live and reducing:
            rows = buf.rows
            if rows.ndim == 2 and rows.strides[0] == 0:  # every rank holds the same result: finish it once
                buf.rows = np.broadcast_to(finish(coll.op, rows[0], coll.n, premul), rows.shape)
            else:
                buf.rows = finish(coll.op, rows, coll.n, premul)
        return end

    return sim.env.process(body()), buf, choice
