"""Per-rank traces in the PyTorch profiler's (Kineto's) layout, one file per rank, for Holistic Trace Analysis.

Each file has `distributedInfo` (backend, rank, world size), `deviceProperties`, and events as the profiler writes
them: on the host, a `record_param_comms` op (PyTorch's comm arguments) enclosing a `cudaLaunchKernel` runtime
call; on the device (pid = local GPU index, tid = stream), the kernel with `stream`, `device` and `correlation`
(the launch's), linked by an `ac2g` flow. NCCL kernels get NCCL's names (HTA counts `^nccl.*Kernel` as
communication); compute spans become compute kernels on stream 7. The host calls take no simulated time: simcomm
models no launch overhead, so each launch sits at its kernel's start. Reductions charged to HBM inside a
collective are part of its kernel and get no event of their own.
"""
from __future__ import annotations

import json
from pathlib import Path

from .perfetto import _collective_args, _lanes, _ns, _us, collective_info, kernel_name

COMPUTE_STREAM, FIRST_NCCL_STREAM = 7, 20
# CUDA's correlation ids are large numbers; tools size their columns from them (HTA stores event indices in a
# column typed like the correlations, so small ids would overflow it).
FIRST_CORRELATION = 1 << 20


def _device_events(acts, rank: int, groups: dict) -> list:
    """(start_ns, end_ns, name, args, kind) of every kernel rank `rank` runs."""
    out = []
    for a in acts:
        s, e = _ns(a.start), _ns(a.end)
        if a.kind == "collective" and a.rank == rank:
            info = collective_info(a.tags)
            if info is None:
                continue
            out.append((s, e, kernel_name(info), _collective_args(a, info, groups), "comm"))
        elif a.kind == "compute" and a.rank == rank and e > s:
            out.append((s, e, a.label or "compute", {"flops": a.nbytes}, "compute"))
        elif a.kind == "p2p" and rank in (a.rank, a.peer) and a.peer != a.rank:
            # a point-to-point transfer: NCCL runs it as a SendRecv kernel on both ends
            out.append((s, e, "ncclDevKernel_SendRecv",
                        {"Collective name": "send" if a.rank == rank else "recv", "bytes": int(a.nbytes),
                         "Process Group Ranks": str(sorted({a.rank, a.peer})), "Group size": 2}, "comm"))
    out.sort(key=lambda x: (x[0], -x[1], x[2]))
    return out


def rank_trace(acts, cluster, rank: int, world: int, groups: dict, backend: str = "nccl") -> dict:
    """The Kineto-style trace of one rank."""
    device = cluster.local_rank(rank)
    host = 100_000 + rank  # the rank's host process id (any number unique per rank)
    kernels = _device_events(acts, rank, groups)
    comm = [i for i, k in enumerate(kernels) if k[4] == "comm"]
    lanes = _lanes([(kernels[i][0], kernels[i][1]) for i in comm])  # concurrent collectives: separate streams
    stream_of = {i: FIRST_NCCL_STREAM + lane for i, lane in zip(comm, lanes)}
    events, flows = [], []
    for i, (s, e, name, args, kind) in enumerate(kernels):
        corr = FIRST_CORRELATION + i
        stream = stream_of.get(i, COMPUTE_STREAM)
        ts, dur = _us(s), _us(e - s)
        if kind == "comm":
            events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": host, "tid": host,
                           "ts": ts, "dur": 0.0, "args": {"External id": corr, **args}})
        else:
            events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::{name}", "pid": host, "tid": host,
                           "ts": ts, "dur": 0.0, "args": {"External id": corr}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": host, "tid": host,
                       "ts": ts, "dur": 0.0, "args": {"External id": corr, "correlation": corr}})
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
                       "args": {"External id": corr, "device": device, "stream": stream, "correlation": corr,
                                **(args if kind == "comm" else {})}})
        flows.append({"ph": "s", "id": corr, "pid": host, "tid": host, "ts": ts, "cat": "ac2g", "name": "ac2g"})
        flows.append({"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": ts, "cat": "ac2g", "name": "ac2g",
                      "bp": "e"})
    meta = [{"name": "process_name", "ph": "M", "pid": host, "tid": 0, "args": {"name": f"rank {rank} host"}},
            {"name": "process_name", "ph": "M", "pid": device, "tid": 0, "args": {"name": f"GPU {device}"}},
            {"name": "thread_name", "ph": "M", "pid": host, "tid": host, "args": {"name": "main thread"}}]
    for stream in sorted({ev["tid"] for ev in events if ev["cat"] == "kernel"}):
        meta.append({"name": "thread_name", "ph": "M", "pid": device, "tid": stream,
                     "args": {"name": f"stream {stream}"}})
    ranks = list(range(world))
    return {"distributedInfo": {"backend": backend, "rank": rank, "world_size": world, "pg_count": 1,
                                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config":
                                               f"cuda:{backend}", "ranks": ranks, "group_size": world}]},
            "schemaVersion": 1,
            "deviceProperties": [{"id": device, "name": cluster.device.name,
                                  "totalGlobalMem": int(getattr(cluster.device, "memory_capacity", 0) or 0)}],
            "traceName": f"simcomm rank {rank}", "displayTimeUnit": "ms", "baseTimeNanoseconds": 0,
            "traceEvents": meta + events + flows}


def rank_traces(activities, cluster, ranks=None) -> dict[int, dict]:
    """{rank: trace} for every rank that ran something (or `ranks`)."""
    acts = list(activities)
    groups: dict = {}
    for a in acts:
        if a.kind == "collective":
            groups.setdefault((a.label, a.start, a.end), []).append(a.rank)
    active = sorted({r for a in acts if a.kind in ("collective", "compute", "p2p")
                     for r in ((a.rank, a.peer) if a.kind == "p2p" else (a.rank,))})
    chosen = active if ranks is None else list(ranks)
    world = max(active, default=-1) + 1
    backend = "gloo" if cluster.device.kind == "cpu" else "nccl"
    return {r: rank_trace(acts, cluster, r, world, groups, backend) for r in chosen}


def write_rank_traces(activities, cluster, directory) -> list[Path]:
    """One `rank<N>.json` per rank in `directory` (what HTA's TraceAnalysis(trace_dir=...) loads)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, trace in rank_traces(activities, cluster).items():
        path = out / f"rank{rank}.json"
        # HTA finds each file's rank with the regex '"rank":\\s+(\\d+)', so keep the space after the colon, and
        # distributedInfo comes first.
        path.write_text(json.dumps(trace, separators=(",", ": ")))
        paths.append(path)
    return paths
