"""Which plans exist for which collective, and one entry point that runs a collective on a simulation."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..errors import AlgorithmError
from . import bruck, direct, doubling, hierarchical, nvls, ring, tree
from .executor import execute
from .plan import KINDS, Buffers, Collective
from .protocols import protocol as make_protocol
from .reduce_ops import check_op, finish, prepare

ALGORITHMS: dict[str, dict[str, object]] = {
    "all_reduce": {"ring": ring.ring_all_reduce, "tree": tree.tree_all_reduce,
                   "recursive_doubling": doubling.recursive_doubling_all_reduce,
                   "halving_doubling": doubling.halving_doubling_all_reduce,
                   "hierarchical": hierarchical.hierarchical_all_reduce, "nvls": nvls.nvls_all_reduce},
    "reduce_scatter": {"ring": ring.ring_reduce_scatter, "direct": direct.direct_reduce_scatter,
                       "halving_doubling": doubling.halving_doubling_reduce_scatter,
                       "nvls": nvls.nvls_reduce_scatter},
    "all_gather": {"ring": ring.ring_all_gather, "direct": direct.direct_all_gather,
                   "recursive_doubling": doubling.recursive_doubling_all_gather, "bruck": bruck.bruck_all_gather,
                   "nvls": nvls.nvls_all_gather},
    "broadcast": {"ring": ring.chain_broadcast, "tree": tree.tree_broadcast, "binomial": direct.binomial_broadcast},
    "reduce": {"ring": ring.chain_reduce, "tree": tree.tree_reduce, "binomial": direct.binomial_reduce},
    "gather": {"direct": direct.direct_gather},
    "scatter": {"direct": direct.direct_scatter},
    "all_to_all": {"direct": direct.pairwise_all_to_all, "bruck": bruck.bruck_all_to_all},
    "barrier": {"dissemination": direct.dissemination_barrier},
    "sendrecv": {"direct": direct.ring_shift},
}
# Protocol latency table each algorithm uses (NCCL has ring and tree tables; NVLS its own).
FAMILY = {"tree": "tree", "nvls": "nvls"}


def register(kind: str, name: str, plan) -> None:
    """Add an algorithm for a collective kind (used by the algorithm modules)."""
    ALGORITHMS[kind][name] = plan


@dataclass(frozen=True)
class Choice:
    algorithm: str
    protocol: str
    predicted: float | None = None  # seconds, from the tuner's model, when the tuner chose


def _gloo_plan(coll: Collective, default):
    """gloo's own ring for the reductions, bitwise (its segments, ring order and combine)."""
    from . import gloo
    if coll.kind == "reduce_scatter":
        return gloo.gloo_reduce_scatter_list if coll.variant == "list" else gloo.gloo_reduce_scatter
    return {"all_reduce": gloo.gloo_all_reduce, "reduce": gloo.gloo_reduce}.get(coll.kind, default)


def algorithms_for(kind: str) -> list[str]:
    if kind not in ALGORITHMS:
        raise AlgorithmError(f"unknown collective {kind!r}; expected one of {', '.join(KINDS)}")
    return sorted(ALGORITHMS[kind])


def run_collective(sim, coll: Collective, rows: Buffers | np.ndarray | None = None, algorithm: str | None = None,
                   protocol: str | None = None, numerics: str = "nccl", label: str | None = None):
    """Start `coll` on `sim` now; returns (simpy process, buffers, Choice).

    rows: the group's data (one row per group rank, layout per collective, see Collective) or None for
    size-only. numerics: "nccl" (each algorithm's natural order, float AVG pre-multiplied) or "gloo" (gloo's
    ring order for all_reduce, AVG = sum then divide, no PREMUL_SUM).
    """
    if numerics not in ("nccl", "gloo"):
        raise AlgorithmError(f"numerics must be 'nccl' or 'gloo', got {numerics!r}")
    if coll.kind in ("all_reduce", "reduce_scatter", "reduce"):
        check_op(coll.op, coll.dtype, "gloo" if numerics == "gloo" else "nccl")
    from .tuner import choose  # the tuner reads the registry, so import late
    choice = choose(sim.cluster, coll, algorithm, protocol)
    plans = ALGORITHMS[coll.kind]
    cluster = sim.cluster
    coll.ranks_per_node = cluster.ranks_per_node
    coll.cluster = cluster  # NVLS plans route flows over the cluster's switch links
    # NCCL runs one channel per NIC rail across nodes; inside one node a ring needs no more (one NVSwitch hop).
    coll.channels = max(1, len(cluster.template.nics)) if cluster.num_nodes > 1 else 1
    plan = plans[choice.algorithm]
    if numerics == "gloo" and algorithm in (None, "ring"):
        plan = _gloo_plan(coll, plan)
    buf = rows if isinstance(rows, Buffers) else Buffers(rows, coll.op)
    premul = numerics == "nccl"
    reducing = coll.kind in ("all_reduce", "reduce_scatter", "reduce")
    if buf.live and reducing:
        buf.rows[...] = prepare(coll.op, buf.rows, coll.n, premul)
    family = FAMILY.get(choice.algorithm, "ring")
    proto = make_protocol(choice.protocol, family, sim.cluster.device.kind)
    op = {"PRODUCT": "prod"}.get(coll.op.name, coll.op.name.lower())
    name = label or f"{coll.kind}:{choice.algorithm}:{proto.name}:{coll.dtype.name}:{op}"

    def body():
        end = yield from execute(sim, coll, plan, buf, proto, name)
        if buf.live and reducing:
            buf.rows = finish(coll.op, buf.rows, coll.n, premul)
        return end

    return sim.env.process(body()), buf, choice
