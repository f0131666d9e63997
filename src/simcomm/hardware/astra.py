"""A Cluster from ASTRA-sim style dimensions: topology, npus_count, bandwidth and latency per dimension.

Dimension 1 is inside a node (Switch: an NVSwitch-like crossbar; FullyConnected: a link between every pair; Ring:
each NPU's router forwards around a ring), dimension 2 (if any, a Switch) across nodes. Bandwidth is that of each
link of the dimension, per direction (ASTRA-sim's convention); latency is one way between two NPUs of the
dimension. The scenario's `cluster` in dimension form (scenario/schema.py DimsCluster) is built here.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .cluster import Cluster
from .fabrics import build_fabric
from .model import NodeTemplate, duplex
from .presets import build_cluster

SOURCE = "ASTRA-sim style dimensions from the scenario file"


@dataclass(frozen=True)
class Dimensions:
    """ASTRA-sim's per-dimension description (rates in bytes/s, times in seconds); `device` names the preset whose
    device figures the NPUs use, optionally with their memory bandwidth or compute rate replaced."""

    topology: tuple[str, ...]
    npus_count: tuple[int, ...]
    bandwidth: tuple[float, ...]
    latency: tuple[float, ...]
    device: str = "hgx-h100"
    memory_bandwidth: float | None = None
    compute_rate: float | None = None


def _node(spec: Dimensions, device) -> NodeTemplate:
    kind, n, bw, lat = spec.topology[0], spec.npus_count[0], spec.bandwidth[0], spec.latency[0]
    gpus = [f"npu{i}" for i in range(n)]
    vertices = {g: device.kind for g in gpus}
    links = []
    if kind == "Switch":
        vertices["switch"] = "nvswitch"
        links = [s for g in gpus for s in duplex(g, "switch", bw, lat / 2, "nvlink")]
    elif kind == "FullyConnected":
        links = [s for i in range(n) for j in range(i + 1, n) for s in duplex(gpus[i], gpus[j], bw, lat, "nvlink")]
    else:  # Ring: each NPU drives a router that forwards around the ring (endpoints never carry transit)
        routers = [f"r{i}" for i in range(n)]
        vertices |= {r: "switch" for r in routers}
        links = [s for g, r in zip(gpus, routers) for s in duplex(g, r, 2 * bw, 0.0, "nvlink")]
        if n > 1:
            pairs = {(i, (i + 1) % n) for i in range(n)} if n > 2 else {(0, 1)}
            links += [s for i, j in sorted(pairs) for s in duplex(routers[i], routers[j], bw, lat, "nvlink")]
    nics, nic_bw, nic_lat = (), 0.0, 0.0
    if len(spec.topology) == 2:
        nics = tuple(f"nic{i}" for i in range(n))
        vertices |= {nic: "nic" for nic in nics}
        links += [s for g, nic in zip(gpus, nics) for s in duplex(g, nic, spec.bandwidth[1], 0.0, "pcie")]
        nic_bw, nic_lat = spec.bandwidth[1], spec.latency[1] / 2  # NIC -> switch -> NIC
    desc = (f"ASTRA-sim style: {' x '.join(map(str, spec.npus_count))} NPUs, topology "
            f"[{', '.join(spec.topology)}], {device.name} device figures")
    return NodeTemplate("dims", desc, device, vertices, tuple(gpus), tuple(links), nics,
                        tuple(range(n)) if nics else (), nic_bw, nic_lat, False, (SOURCE,))


def build_astra_cluster(spec: Dimensions, tuning_changes: dict | None = None) -> Cluster:
    """The cluster of `spec`: npus_count[0] NPUs per node, npus_count[1] nodes on one switch; `tuning_changes`
    set fields of its tuning (see build_cluster)."""
    preset = build_cluster(spec.device)
    changes = {k: getattr(spec, k) for k in ("memory_bandwidth", "compute_rate") if getattr(spec, k) is not None}
    device = dataclasses.replace(preset.device, **changes)
    template = _node(spec, device)
    # NCCL's channels as on the preset's machine (inside a node; one NIC per NPU across)
    template = dataclasses.replace(template, nccl_channels=preset.template.nccl_channels,
                                   tuning=dataclasses.replace(template.tuning, **(tuning_changes or {})))
    nodes = spec.npus_count[1] if len(spec.npus_count) == 2 else 1
    fabric = build_fabric("switch", nodes, template) if nodes > 1 else None
    name = "x".join(map(str, spec.npus_count)) + " " + "-".join(t.lower() for t in spec.topology)
    return Cluster(name, template, nodes, fabric)
