"""Clusters laid out as a measured or launched run was: nnodes nodes of nproc_per_node ranks each (a node's first
GPUs when it has more). No torch here: compare and calibrate use it too."""
from __future__ import annotations

import dataclasses

from ..errors import SimcommError
from ..hardware import Cluster, build_cluster, build_fabric, get_preset
from ..vocab import MAX_RANKS_PER_NODE


def torchrun_cluster(cluster, nproc_per_node: int, nnodes: int) -> Cluster:
    """The cluster for `nnodes` x `nproc_per_node` ranks: ranks r -> node r // nproc_per_node, local GPU
    r % nproc_per_node (a node with fewer ranks than GPUs keeps its first GPUs)."""
    if isinstance(cluster, Cluster):
        if cluster.num_nodes != nnodes or cluster.ranks_per_node < nproc_per_node:
            raise SimcommError(f"--nnodes {nnodes} --nproc-per-node {nproc_per_node} does not fit {cluster.name}")
        return cluster
    probe = build_cluster(cluster)
    if probe.device.kind == "cpu":
        if nproc_per_node > MAX_RANKS_PER_NODE:
            raise SimcommError(f"{nproc_per_node} ranks per node: a {probe.name} host holds at most "
                               f"{MAX_RANKS_PER_NODE} (as in a scenario: more threads than a user would wait for on one "
                               f"machine); use more nodes")
        return build_cluster(cluster, nodes=nnodes, ranks_per_node=nproc_per_node)
    if nproc_per_node > probe.ranks_per_node:
        raise SimcommError(f"--nproc-per-node {nproc_per_node} exceeds the {probe.ranks_per_node} GPUs per node of "
                           f"{probe.name}")
    if nnodes == 1:
        return probe
    full = build_cluster(cluster, nodes=nnodes)
    if nproc_per_node == probe.ranks_per_node:
        return full
    template = first_ranks(probe.template, nproc_per_node)
    fabric = build_fabric(get_preset(cluster).default_fabric, nnodes, template)
    return Cluster(f"{nnodes}x {probe.name} ({nproc_per_node} of {probe.ranks_per_node} GPUs, {fabric.kind})",
                   template, nnodes, fabric)


def first_ranks(t, n: int):
    """Node template t with only its first n endpoints (the other GPUs and their links removed)."""
    gone = set(t.endpoints[n:])
    return dataclasses.replace(
        t, vertices={v: k for v, k in t.vertices.items() if v not in gone}, endpoints=t.endpoints[:n],
        links=tuple(link for link in t.links if link.src not in gone and link.dst not in gone),
        endpoint_nic=t.endpoint_nic[:n], description=f"{t.description} [first {n} GPUs only]")
