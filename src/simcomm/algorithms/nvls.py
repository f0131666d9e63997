"""NVLS: NVLink SHARP, where the NVSwitch itself reduces and multicasts (single-node groups on NVLS hardware).

How NCCL's single-node NVLS all-reduce moves data: the buffer is split into n chunks, one per GPU. GPU j issues
`multimem.ld_reduce` on chunk j: the switch reads chunk j from every GPU (its own included), reduces in the
switch and returns the sum to GPU j; then GPU j issues `multimem.st`: it sends the reduced chunk up once and the
switch writes a copy into every GPU (its own included). Per GPU and direction that is S + S/n bytes (S the
buffer): up, all n chunks for the reduction plus its own reduced chunk for the multicast; down, its reduced
chunk plus the n multicast copies. No GPU reduces anything: the HBM is not charged for reductions.

Flow model. Flows follow explicit one-link paths (GPU -> switch on the sender's up link, switch -> GPU on the
receiver's down link; `Cluster.path_route` / `switch_links`), since the switch, not a GPU, is the far end. NCCL
runs the reduction and the multicast as one pipeline of small chunks, so in steady state both directions of every
link carry both phases at once; the plan is therefore ONE step holding all four flow sets:
  reduce-up   GPU i -> switch   S        (the n chunks it contributes)
  reduce-down switch -> GPU j   S/n      (its reduced chunk)
  mcast-up    GPU j -> switch   S/n      (its reduced chunk, sent once)
  mcast-down  switch -> GPU i   S        (the n reduced chunks)
An uncontended run takes 25 us (NCCL's NVLS latency, charged once like NCCL's model) + one link latency +
(S + S/n) / link bandwidth. On HGX H100 (8 x 370.8 GB/s) that is ~577 GB/s busbw at large sizes, against NCCL's
own model 2 x 0.85 x 370.8 x 15/16 = 591 GB/s. The pipeline fill (one chunk) is neglected; what each chunk
costs is a share of the bandwidth (protocols.nvls_chunk, the cluster's fitted chunk_overhead).

reduce_scatter is the reduce half (each GPU sends all n blocks up, gets its reduced block down); all_gather is
the multicast half (each GPU sends its block up once, gets all n blocks down).
"""
from __future__ import annotations

import math

import numpy as np

from ..arrays import unique
from ..errors import AlgorithmError
from .base import Algorithm
from .cost import CostModel
from .plan import Buffers, Collective, Step
from .reduce_ops import combine


def why_not(cluster, ranks: np.ndarray) -> str | None:
    """Why NVLS cannot run this group on this cluster (None when it can)."""
    if cluster is None:
        return "nvls needs the cluster (place the collective on a cluster)"
    if not cluster.template.nvls:
        return f"nvls needs NVSwitches with NVLink SHARP; {cluster.name} has none"
    nodes = unique(np.asarray(ranks) // cluster.ranks_per_node)
    if len(nodes) > 1:
        return f"nvls runs inside one node; this group spans {len(nodes)} nodes"
    return None


def switch_routes(cluster, ranks) -> tuple[np.ndarray, np.ndarray]:
    """Each rank's route up to its node's NVSwitch and back down (route ids), in the order of `ranks`."""
    up, down = cluster.switch_ports(np.asarray(ranks, dtype=np.int64))
    return cluster.link_routes(up), cluster.link_routes(down)


def _links(coll: Collective):
    reason = why_not(coll.placement.cluster, coll.ranks)
    if reason:
        raise AlgorithmError(reason)
    return switch_routes(coll.placement.cluster, coll.ranks)


def _step(parts, label: str) -> Step:
    """One step from (src, dst, nbytes, routes) flow sets."""
    src, dst, nb, routes = (np.concatenate([np.asarray(p[k], dtype=t) for p in parts])
                            for k, t in enumerate((np.int64, np.int64, np.float64, np.int64)))
    return Step(src, dst, nb, label=label, routes=routes)


def _reduce_rows(buf: Buffers, x) -> np.ndarray:
    """The switch's reduction over the group (axis 0, or a list of the ranks' own arrays), in rank order."""
    acc = x[0].copy()
    for i in range(1, len(x)):
        combine(buf.op, acc, x[i], out=acc)
    return acc


def nvls_all_reduce(coll: Collective, buf: Buffers):
    n = coll.n
    if n == 1:
        return
    up, down = _links(coll)
    per = -(-coll.count // n)
    chunk = np.clip(coll.count - per * np.arange(n), 0, per) * coll.itemsize
    total = coll.count * coll.itemsize
    r = np.arange(n)
    yield _step([(r, r, np.full(n, total), up),  # reduce-up: every GPU's n chunks
                 (r, r, chunk, down),  # reduce-down: chunk j, reduced, to GPU j
                 (r, r, chunk, up),  # multicast-up: GPU j's reduced chunk, once
                 (r, r, np.full(n, total), down)],  # multicast-down: all n reduced chunks to every GPU
                "nvls reduce+multicast")
    if buf.unstacked:  # straight from the ranks' own arrays
        buf.rows = np.broadcast_to(_reduce_rows(buf, buf.sources), (n, coll.count))
    elif buf.live:
        buf.rows[:] = _reduce_rows(buf, buf.rows)


def nvls_reduce_scatter(coll: Collective, buf: Buffers):
    """Rows (n, n*count): GPU i sends its n blocks up, the switch returns block i reduced."""
    n = coll.n
    if n == 1:
        return
    up, down = _links(coll)
    blk = coll.count * coll.itemsize
    r = np.arange(n)
    yield _step([(r, r, np.full(n, n * blk), up), (r, r, np.full(n, blk), down)], "nvls reduce-scatter")
    if buf.live:
        w = buf.rows.reshape(n, n, coll.count)
        w[r, r] = _reduce_rows(buf, w)[r]


def nvls_all_gather(coll: Collective, buf: Buffers):
    """Rows (n, n*count): GPU j multicasts block j; every GPU receives all n blocks."""
    n = coll.n
    if n == 1:
        return
    up, down = _links(coll)
    blk = coll.count * coll.itemsize
    r = np.arange(n)
    yield _step([(r, r, np.full(n, blk), up), (r, r, np.full(n, n * blk), down)], "nvls all-gather")
    if buf.live:
        w = buf.rows.reshape(n, n, coll.count)
        w[:, r] = w[r, r][None]


NVLS_CHANNELS = 16  # NCCL's default NVLS channel count on Hopper
NVLS_EFFICIENCY = 0.85  # tuning.cc, Hopper


def _predict(m: CostModel, coll: Collective) -> float:
    """NCCL's NVLS model: the NVLS latency once; busBw = bwIntra * 0.85 * (nCh-1)/nCh, x2 for all_reduce. Simple only."""
    if m.proto.name != "Simple":
        return math.inf  # NCCL has no LL/LL128 NVLS
    cluster, n, size = m.cluster, m.n, float(coll.nbytes)
    up = cluster.switch_links(int(coll.ranks[0]))[0] if cluster.template.nvls else None
    lat = m.proto.base_latency + (m.intra_lat if up is None else m.proto.hop(m.intra_kind) + float(cluster.link_latency[up]))
    # the cluster's tuning scales the NVLS bandwidth the same way in the executor (proto.efficiency)
    bus = m.intra_bw * NVLS_EFFICIENCY * (NVLS_CHANNELS - 1) / NVLS_CHANNELS * m.proto.efficiency
    if coll.kind == "all_reduce":
        return lat + size * 2 * (n - 1) / n / (2 * bus)
    return lat + size * (n - 1) / n / bus


def _why_not(cluster, coll: Collective) -> str | None:
    if cluster.device.kind != "gpu":
        return f"nvls needs GPUs on NVSwitch; {cluster.name} has {cluster.device.kind} ranks"
    return why_not(cluster, coll.ranks)


NVLS = Algorithm("nvls", {"all_reduce": nvls_all_reduce, "reduce_scatter": nvls_reduce_scatter,
                          "all_gather": nvls_all_gather},
                 _predict, lambda m, coll: 0.0, _why_not, family="nvls",
                 nccl_kinds=("all_reduce", "all_gather", "reduce_scatter"))
