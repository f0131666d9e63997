"""How many channels (one CTA each, resident on every GPU of the group for the whole collective) a collective's
kernel runs with, as NCCL picks them (NCCL 2.2x, src/enqueue.cc topoGetAlgoInfo and src/graph/connect.cc):

- a communicator has the channels its topology search found (the node template's `nccl_channels`: inside one
  node, or across nodes), bounded by NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS (Tuning.min_channels /
  max_channels);
- ring and tree use fewer for small buffers: one channel less while S < channels x threads x threshold, threads
  512 (LL, Simple) or 640 (LL128), threshold 8 bytes (LL, LL128) or 64 (Simple) per thread, the ring's LL times
  the ranks (NCCL_*_THREAD_THRESHOLD); so Simple needs 32 KiB per channel, LL128 5 KiB;
- NVLS and NVLS-Tree use NVLS's own channels (NCCL_NVLS_NCHANNELS, 16 on Hopper);
- point-to-point (send/recv, and all_to_all, gather and scatter, which NCCL runs as grouped send/recv) uses its
  p2p channels per peer: the communicator's channels inside a node, NCCL_NCHANNELS_PER_NET_PEER = 2 across, at
  most one per chunk (NCCL_P2P_NVL_CHUNKSIZE 512 KiB, NCCL_P2P_NET_CHUNKSIZE 128 KiB).

Algorithms simcomm adds beyond NCCL's (recursive doubling, Bruck, ...) are counted as a ring would be. CPU
ranks (gloo) hold no SMs.
"""
from __future__ import annotations

import numpy as np

from .plan import Collective

THREADS = {"LL": 512, "LL128": 640, "Simple": 512}  # NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS
THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}  # NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD, bytes per thread
NVLS_CHANNELS = 16  # NCCL_NVLS_NCHANNELS on Hopper
NET_PEER_CHANNELS = 2  # NCCL_NCHANNELS_PER_NET_PEER
P2P_CHUNK = {"nvlink": 512 << 10, "net": 128 << 10}  # NCCL_P2P_NVL_CHUNKSIZE, NCCL_P2P_NET_CHUNKSIZE
P2P_KINDS = ("all_to_all", "gather", "scatter", "sendrecv")


def communicator_channels(cluster, nodes: int) -> int:
    """Channels of a communicator whose ranks span `nodes` nodes (0 where NCCL does not run)."""
    if cluster.device.kind != "gpu" or not cluster.device.sms:
        return 0
    inside, across = cluster.template.nccl_channels
    channels = across if nodes > 1 else inside
    tuning = cluster.template.tuning
    if tuning.min_channels:
        channels = max(channels, tuning.min_channels)
    if tuning.max_channels:
        channels = min(channels, tuning.max_channels)
    return max(channels, 1 if channels else 0)


def collective_channels(cluster, coll: Collective, algorithm: str, protocol: str) -> int:
    """Channels (CTAs per GPU) of `coll` run with `algorithm` and `protocol` on `cluster`."""
    nodes = len(np.unique(coll.ranks // cluster.ranks_per_node))
    base = communicator_channels(cluster, nodes)
    if not base or coll.n < 2:
        return 0
    if algorithm in ("nvls", "nvls_tree"):
        return NVLS_CHANNELS
    if coll.kind in P2P_KINDS:
        per_peer = p2p_channels(cluster, nodes > 1, coll.nbytes / max(coll.n, 1))
        return min(base, per_peer * (coll.n - 1)) if coll.kind == "all_to_all" else per_peer
    threshold = THRESHOLD.get(protocol, THRESHOLD["Simple"]) * (coll.n if protocol == "LL" and
                                                               algorithm == "ring" else 1)
    per_channel = THREADS.get(protocol, THREADS["Simple"]) * threshold
    return int(max(1, min(base, coll.nbytes // per_channel)))


def p2p_channels(cluster, across_nodes, nbytes):
    """Channels of sends (and their receives) of `nbytes` between two GPUs, `across_nodes` or not (scalars, or
    arrays of one per send); 0 where NCCL does not run."""
    inside = communicator_channels(cluster, 1)
    if not inside:
        return np.zeros(np.shape(nbytes), dtype=np.int64) if np.ndim(nbytes) else 0
    across = np.asarray(across_nodes, dtype=bool)
    per_peer = np.where(across, min(NET_PEER_CHANNELS, communicator_channels(cluster, 2)), inside)
    chunks = np.ceil(np.asarray(nbytes, dtype=np.float64) / np.where(across, P2P_CHUNK["net"], P2P_CHUNK["nvlink"]))
    out = np.maximum(1, np.minimum(per_peer, chunks)).astype(np.int64)
    return out if out.ndim else int(out)
