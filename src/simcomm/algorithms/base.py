"""An algorithm is one object: its plans (one per collective kind), its cost prediction for the tuner, and its
"cannot run here because ..." check."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..errors import AlgorithmError
from .cost import CostModel
from .plan import Buffers, Collective, Plan


def _runs_anywhere(cluster, coll: Collective) -> str | None:
    return None


def ring_shape_reduced(m: CostModel, coll: Collective) -> float:
    """Bytes the busiest rank reduces in a ring-shaped reduction: all of it for reduce, (n-1)/n otherwise."""
    size = float(coll.nbytes)
    return size if coll.kind == "reduce" else (m.n - 1) / m.n * size


def stepwise(predict: Callable[[CostModel, Collective], float]) -> Callable[[CostModel, Collective], float]:
    """A step model's prediction plus the protocol's base latency (launch and setup, once per collective)."""
    def with_base(m: CostModel, coll: Collective) -> float:
        return m.proto.base_latency + predict(m, coll)
    with_base.__doc__ = predict.__doc__
    return with_base


@dataclass(frozen=True)
class Algorithm:
    """A collective algorithm.

    plans: collective kind -> plan (a generator of steps, see plan.py).
    predict(model, coll): predicted seconds of the transfers and their latencies as the simulation times the
        plan (ring, tree, NVLS-Tree, chains: lockstep stages and latency chains; NVLS: NCCL's formula; an
        alpha-beta step model otherwise), without the protocol's base latency for step models.
    reduced_bytes(model, coll): bytes the busiest rank reduces after receiving, for devices that cannot fuse the
        reduction into the transfer (gloo on CPUs); 0 where reductions are pipelined with the transfers.
    why_not(cluster, coll): why it cannot run this group here, or None.
    family: which protocol latency table NCCL uses for it ("ring", "tree" or "nvls").
    nccl_kinds / gloo_kinds: collectives for which NCCL's (gloo's) own tuner would consider it.
    alone: collective kind -> alone(sim, coll, proto, label, tags): the plan's timing in closed form when it has
        the simulation to itself (symmetric.py), or None where that does not hold; the executor tries it first.
    """

    name: str
    plans: Mapping[str, Plan]
    predict: Callable[[CostModel, Collective], float]
    reduced_bytes: Callable[[CostModel, Collective], float] = ring_shape_reduced
    why_not: Callable[[object, Collective], str | None] = _runs_anywhere
    family: str = "ring"
    nccl_kinds: tuple[str, ...] = ()
    gloo_kinds: tuple[str, ...] = field(default=())
    alone: Mapping[str, Callable] = field(default_factory=dict)

    def supports(self, kind: str) -> bool:
        return kind in self.plans

    def plan(self, coll: Collective, buf: Buffers):
        if coll.kind not in self.plans:
            raise AlgorithmError(f"algorithm {self.name!r} has no plan for {coll.kind}")
        return self.plans[coll.kind](coll, buf)
