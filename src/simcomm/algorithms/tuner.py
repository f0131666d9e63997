"""Picks algorithm and protocol by predicted time, the way NCCL's tuner does (docs/model.md says what it follows).

time = the algorithm's own prediction of its simulated plan (algorithms/<name>.py: the lockstep stages and latency
chains of the ring, the double tree, NVLS-Tree and the pipelined chains, NCCL's formula for NVLS, alpha-beta step
models for the rest, all fed by the cluster's figures through cost.CostModel), plus the reductions a device cannot
fuse into its transfers (gloo-style CPU ranks reduce after receiving: the busiest rank's reduced bytes, read twice
and written once at memory speed; NCCL fuses them: nothing). Protocols are the simulation's own (protocols.py, with
the cluster's tuning): LL moves half its wire bytes, LL128 0.92, Simple 1, and LL no faster than NCCL's llMaxBw
per rank, as the executor holds it (CostModel.capped). So the tuner picks what simulates fastest
(tests/test_calibration.py checks this with the fitted presets).

choose() chooses like NCCL: among the algorithms NCCL's tuner weighs for the collective (gloo's ring for
all_reduce on CPU ranks), minus those that cannot run the group here. Any algorithm can be forced by name
(NCCL_ALGO-style); forcing one that cannot run is an AlgorithmError that says why. The Choice keeps every
(algorithm, protocol, predicted time) it weighed, so reports can say why it chose what it did.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import AlgorithmError
from ..vocab import REDUCING
from .base import Algorithm
from .catalog import ALGORITHMS, algorithm
from .cost import CostModel
from .plan import Collective
from .protocols import PROTOCOLS, protocol_for


@dataclass(frozen=True)
class Choice:
    algorithm: str
    protocol: str
    predicted: float | None = None  # seconds, from the tuner's model, when the tuner chose
    weighed: tuple[tuple[str, str, float], ...] = ()  # (algorithm, protocol, predicted seconds), fastest first
    channels: int = 0  # CTAs its kernel holds on every GPU of the group (channels.collective_channels)


def _placed(cluster, coll: Collective) -> Collective:
    return coll if coll.placement.cluster is cluster else coll.placed(cluster)


def why_not(cluster, coll: Collective, name: str) -> str | None:
    """Why algorithm `name` cannot run `coll` on `cluster` (None when it can)."""
    return algorithm(coll.kind, name).why_not(cluster, _placed(cluster, coll))


def predict(cluster, coll: Collective, name: str, proto_name: str) -> float:
    """Predicted seconds for coll with algorithm and protocol on cluster (inf if unsupported): the algorithm's
    model of its simulated plan, fed by the cluster's figures and the protocol the simulation runs."""
    if coll.n == 1:
        return 0.0
    alg = algorithm(coll.kind, name)
    coll = _placed(cluster, coll)
    proto = protocol_for(proto_name, alg.family, cluster, coll)
    m = CostModel(cluster, coll, proto)
    return alg.predict(m, coll) + _unfused_reduction(m, coll, alg)


def _unfused_reduction(m: CostModel, coll: Collective, alg: Algorithm) -> float:
    if m.fused or coll.kind not in REDUCING:
        return 0.0
    return 3 * alg.reduced_bytes(m, coll) / m.mem_bw


def candidates(cluster, coll: Collective, available=None) -> list[str]:
    """Algorithms choose() weighs when none is forced: NCCL's (or gloo's) menu, minus what cannot run here."""
    available = ALGORITHMS.get(coll.kind, {}) if available is None else available
    usable = [ALGORITHMS[coll.kind][a] for a in sorted(available) if why_not(cluster, coll, a) is None]
    menu = [a for a in usable if coll.kind in a.gloo_kinds] if cluster.device.kind == "cpu" else []
    menu = menu or [a for a in usable if coll.kind in a.nccl_kinds]
    return [a.name for a in (menu or usable)]


def choose(cluster, coll: Collective, algorithm: str | None = None, protocol: str | None = None) -> Choice:
    """The (algorithm, protocol) with the least predicted time, honouring any forced choice."""
    if coll.kind not in ALGORITHMS:
        raise AlgorithmError(f"unknown collective {coll.kind!r}")
    if protocol is not None and protocol not in PROTOCOLS:
        raise AlgorithmError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    if algorithm is not None:
        reason = why_not(cluster, coll, algorithm)  # also checks that it exists
        if reason:
            raise AlgorithmError(f"algorithm {algorithm!r} cannot run this {coll.kind}: {reason}")
        algos = [algorithm]
    else:
        algos = candidates(cluster, coll)
        if not algos:
            raise AlgorithmError(f"no algorithm can run this {coll.kind} on {cluster.name}")
    cpu = cluster.device.kind == "cpu"
    protos = [protocol or "Simple"] if cpu else ([protocol] if protocol else list(PROTOCOLS))
    best, weighed = None, []
    for a in algos:
        for p in protos:
            t = predict(cluster, coll, a, p)
            if math.isfinite(t):
                weighed.append((a, p, t))
                if best is None or t < best.predicted:
                    best = Choice(a, p, t)
    if best is None:
        raise AlgorithmError(f"algorithm {algos[0]!r} does not support protocol {protos[0]!r}"
                             + (f"; {algos[0]} runs only with Simple" if algorithm is not None and
                                ALGORITHMS[coll.kind][algos[0]].family == "nvls" else ""))
    return Choice(best.algorithm, best.protocol, best.predicted, tuple(sorted(weighed, key=lambda w: w[2])))
