"""NCCL's protocols as latency and bandwidth efficiencies (figures from NCCL 2.30's src/graph/tuning.cc).

A protocol adds a software latency per step that depends on what the step crosses (NVLink, PCIe, network) and
divides the bandwidth by its efficiency (LL sends a flag with every 4 bytes; LL128 one per 120 of 128 bytes).
LL also has a ceiling, NCCL's llMaxBw: however fast the links, a rank moves LL data at no more than that many
bytes/s (busBw, which is what each rank sends per second in a ring or tree), lower across nodes (`max_rate`).

NVLS (and NVLS-Tree) move their data in chunks whose size NCCL picks from the buffer's size (`nvls_chunk`); a
chunk costs a fixed overhead on top of its bytes (the cluster's `Tuning.chunk_overhead`, in bytes), so NVLS's
bandwidth steps up where NCCL doubles its chunk, as the measured tables do (docs/model.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass


from ..errors import AlgorithmError
from .plan import group_shape

PROTOCOLS = ("LL", "LL128", "Simple")


@dataclass(frozen=True)
class Protocol:
    name: str
    efficiency: float  # payload bytes / wire bytes
    hop_latency: dict  # seconds per step, by what the step crosses: "nvlink", "pcie", "net", "loopback"
    base_latency: float  # seconds once per collective (launch and setup)
    max_rate: float = math.inf  # payload bytes/s one rank may send (LL's llMaxBw); the executor enforces it

    @property
    def wire_factor(self) -> float:
        return 1.0 / self.efficiency

    def hop(self, link_class: str) -> float:
        return self.hop_latency.get(link_class, self.hop_latency.get("pcie", 0.0))


_US = 1e-6
# Ring per-hop latency {LL, LL128, Simple}: NVLink 0.6/1.9/3.4; PCI 1.0/2.5/5.7; NET 2.7/4.0/14.0 (us).
# Tree: NVLink 0.6/1.25/4.0; PCI 1.0/1.9/4.0; NET 5.0/8.5/14. Base: Ring 6.6/14.0/8.4, Tree 6.8/14.0/8.4.
_HOP = {
    "ring": {"LL": (0.6, 1.0, 2.7), "LL128": (1.9, 2.5, 4.0), "Simple": (3.4, 5.7, 14.0)},
    "tree": {"LL": (0.6, 1.0, 5.0), "LL128": (1.25, 1.9, 8.5), "Simple": (4.0, 4.0, 14.0)},
}
_BASE = {"ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}, "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4}}
# LL: half the bytes are flags. LL128: NCCL models 0.92 of Simple's bandwidth.
_EFFICIENCY = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
# llMaxBw (GB/s) by GPU generation for groups on 1 node / 2 nodes / more (tuning.cc's llMaxBws table); the
# generation is read off the device's name. Ring and tree LL are both capped at it (NCCL: min(llMaxBw, busBw x
# 1/4 or 1/3) for the ring, min(llMaxBw, busBw / 3.8) for the tree; the simulation's own LL efficiency, 0.5 times
# the fitted figure, stands for the second factor).
_LL_MAX_BW = ((("V100",), (39.0, 39.0, 20.4)), (("A100", "A800", "A30"), (87.7, 22.5, 19.0)),
              (("H100", "H200", "H800", "H20"), (141.0, 45.0, 35.0)), (("B100", "B200", "B300"), (282.0, 90.0, 70.0)))


def ll_max_bw(device_name: str, nodes: int) -> float:
    """NCCL's llMaxBw in bytes/s for `device_name`'s GPU generation and a group on `nodes` nodes (inf for a
    device NCCL's table does not know: no cap)."""
    for names, caps in _LL_MAX_BW:
        if any(x in device_name.upper() for x in names):
            return caps[0 if nodes <= 1 else 1 if nodes == 2 else 2] * 1e9
    return math.inf


# NCCL's NVLS chunk: nvlsChunkSize (128 KiB), halved to 64 KiB for buffers under 64 chunks per concurrent op, to
# 32 KiB under 8 and to 16 KiB under 2 (enqueue.cc); concurrent ops = NVLS channels (16) x heads (one per GPU of
# the node). With 8 GPUs the chunk doubles at 8 MiB, 64 MiB and 1 GiB: the single-node H100 tables' busbw jumps at
# 64 MiB and 1 GiB (measured-nccl-tests.md sections 1 and 3), and so does the 2-node p5 table's NVLS-Tree
# (section 10), so NVLS-Tree uses the same schedule.
NVLS_CHANNELS = 16
_NVLS_CHUNK_STEPS = ((64, 64 << 10), (8, 32 << 10), (2, 16 << 10))


def nvls_chunk(nbytes: int, heads: int) -> int:
    """Bytes per chunk NCCL's NVLS moves for a buffer of nbytes (nccl-tests' S) with `heads` GPUs per node."""
    chunk, ops = 128 << 10, NVLS_CHANNELS * max(1, heads)
    for times, smaller in _NVLS_CHUNK_STEPS:
        if nbytes < times * ops * chunk and chunk > smaller:
            chunk = smaller
    return chunk


# glibc's malloc maps every allocation of at least this much afresh (its mmap threshold's ceiling on 64-bit hosts)
# and unmaps it when freed, so each call's buffer is faulted in page by page.
FRESH_MAPPING = 32 << 20


def fresh_output_time(kind: str, nbytes: int, ranks: int, tuning) -> float:
    """Seconds a gloo all_gather of nbytes (nccl-tests' S) spends faulting in its output: torch's gloo backend
    gathers into a flat buffer of the whole output allocated on every call and then copies it out. At
    FRESH_MAPPING bytes and more every rank faults in all of it, at the tuning's first_touch_rate per core, the
    ranks sharing the host's cores (measured on this repository's 2-core host: 0.43-0.52 ms/MiB for 2 ranks up to
    28 MiB, 0.93-1.22 from 32 MiB; docs/validation.md section 5). 0 without a rate."""
    if kind != "all_gather" or nbytes < FRESH_MAPPING or tuning is None or not tuning.first_touch_rate:
        return 0.0
    return nbytes * tuning.sharing(ranks) / tuning.first_touch_rate


def protocol(name: str, family: str = "ring", device_kind: str = "gpu", tuning=None, kind: str = "",
             ranks: int = 0, device_name: str = "", nodes: int = 1, nbytes: int = 0, heads: int = 1) -> Protocol:
    """The protocol `name` as used by an algorithm of `family` ("ring" or "tree" latencies).

    CPU ranks (gloo over TCP) have no NCCL protocols: they get a plain protocol with the tuning's overheads and,
    for an all_gather, the time its fresh output takes to fault in (fresh_output_time).
    `tuning` (the cluster's hardware.Tuning) adds its launch and per-step overheads and scales the bandwidth by its
    efficiency for the family, the protocol and the collective `kind`, and for a group spanning nodes by its "net"
    efficiency (or "net.KIND" where the tuning has one: NCCL's alltoall, plain sends posted at once, drives the
    NICs harder than its rings); without it NCCL's tuner figures stand.
    LL on a GPU NCCL's table knows (`device_name`) is capped at llMaxBw for a group spanning `nodes` nodes.
    NVLS moving a buffer of `nbytes` with `heads` GPUs per node runs at its chunk's share of the bandwidth,
    c / (c + the tuning's chunk_overhead).
    """
    launch = tuning.launch_overhead if tuning is not None else 0.0
    step = tuning.step_overhead_for(ranks) if tuning is not None else 0.0
    across = 1.0  # across nodes: what the network transport achieves, "net" or the collective's own "net.KIND"
    if tuning is not None and nodes > 1:
        across = tuning.efficiency_of(f"net.{kind}", tuning.efficiency_of("net"))
    if device_kind == "cpu":
        factor = (tuning.factor(family, kind) if tuning is not None else 1.0) * across
        hops = {k: step for k in ("nvlink", "pcie", "net", "loopback")} if step else {}
        return Protocol("TCP", factor, hops, launch + fresh_output_time(kind, nbytes, ranks, tuning))
    if name not in PROTOCOLS:
        raise AlgorithmError(f"unknown protocol {name!r}; expected one of {', '.join(PROTOCOLS)}")
    nv, pci, net = _HOP["tree" if family == "tree" else "ring"][name]
    base = _BASE["tree" if family == "tree" else "ring"][name]
    if family == "nvls":
        nv, pci, net, base = 25.0, 25.0, 18.0, 0.0  # NVLS Simple: NVLink 25, NET 18; base 0
    factor = (tuning.factor(family, name, kind) if tuning is not None else 1.0) * across
    if family == "nvls" and tuning is not None and tuning.chunk_overhead:
        chunk = nvls_chunk(nbytes, heads)
        factor *= chunk / (chunk + tuning.chunk_overhead)
    return Protocol(name, _EFFICIENCY[name] * factor,
                    {"nvlink": nv * _US + step, "pcie": pci * _US + step, "net": net * _US + step,
                     "loopback": pci * _US + step}, base * _US + launch,
                    ll_max_bw(device_name, nodes) if name == "LL" else math.inf)


def protocol_for(name: str, family: str, cluster, coll) -> Protocol:
    """The protocol `name` for collective `coll` (placed) on `cluster`: its tuning, device, node count and, for
    NVLS's chunks, the buffer's size and the GPUs per node."""
    nodes = group_shape(cluster, coll.ranks).nodes if cluster.ranks_per_node else 1
    return protocol(name, family, cluster.device.kind, cluster.template.tuning, coll.kind, coll.n,
                    cluster.device.name, nodes, coll.nbytes, -(-coll.n // nodes))
