"""The peer benchmark's simcomm side: allreduce.c as a simcomm rank program, on star_platform.py's star.

Every rank all-reduces COUNT float32 values (its rank number) with real data and checks the sum.
Usage: python allreduce.py N [COUNT]   (prints the simulated seconds and the result, as allreduce.c does)
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import simcomm
import simcomm.distributed as dist
from simcomm.hardware import Cluster, NodeTemplate, build_cluster, build_fabric, duplex

sys.path.insert(0, str(Path(__file__).parent))
from star_platform import BANDWIDTH_GBPS, LATENCY_US  # noqa: E402


def star(n: int) -> Cluster:
    """n hosts on one switch, each joined by a BANDWIDTH_GBPS, LATENCY_US link (SimGrid's <cluster>): a node per
    host whose NIC port is that link, on a single-switch fabric (routes are found per pair, when first used)."""
    device = build_cluster("cpu-host").device
    fast = duplex("host", "nic", 1e15, 0.0, "pcie")  # inside the host: never the bottleneck
    template = NodeTemplate("host", "one host of the star", device, {"host": device.kind, "nic": "nic"}, ("host",),
                            tuple(fast), ("nic",), (0,), BANDWIDTH_GBPS * 1e9, LATENCY_US * 1e-6)
    return Cluster(f"star{n}", template, n, build_fabric("switch", n, template) if n > 1 else None)


def program(rank: int, count: int):
    x = np.full(count, rank, dtype=np.float32)
    start = simcomm.clock.time()
    dist.all_reduce(x)
    elapsed = simcomm.clock.time() - start
    expect = np.float32(dist.get_world_size() * (dist.get_world_size() - 1) / 2)
    wrong = int((x != expect).sum())
    if wrong:
        raise AssertionError(f"rank {rank}: {wrong} wrong values")
    return elapsed, float(x[0])


if __name__ == "__main__":
    n = int(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
    # The default detail, as a user writes it: beyond 64 ranks per-step records, no per-message trace (SMPI keeps
    # none either unless asked).
    result = simcomm.spawn(program, args=(count,), nprocs=n, cluster=star(n))
    elapsed, value = result.results[0]
    print(f"simulated_seconds {elapsed:.9g} result {value:.1f}")
