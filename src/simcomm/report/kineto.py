"""Per-rank traces in the PyTorch profiler's (Kineto's) layout, one file per rank, for Holistic Trace Analysis.

Each file has `distributedInfo` (backend, rank, world size), `deviceProperties`, and events as the profiler writes
them: on the host, a `record_param_comms` op (PyTorch's comm arguments) enclosing a `cudaLaunchKernel` runtime
call; on the device (pid = local GPU index, tid = stream), the kernel with `stream`, `device` and `correlation`
(the launch's), linked by an `ac2g` flow. NCCL kernels get NCCL's names (HTA counts `^nccl.*Kernel` as
communication); compute kernels run on stream 7. Records that cover kernels and the waits between them (a training
step's passes and layers: tag `annotation`) become `gpu_user_annotation` ranges on stream 7, which HTA's kernel
analyses leave out, as they do `record_function` ranges. The host calls take no simulated time: simcomm models no
launch overhead, so each launch sits at its kernel's start. Reductions charged to HBM inside a collective are part
of its kernel and get no event of their own.

Where a workload simulated some GPUs for others (a training step: one data-parallel replica, one GPU per stage:
parallel/step_trace.py), `copies` says which simulated GPU each rank's file is made from and how that GPU's peers
are renamed for it; every rank of the layout then gets its file.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .perfetto import _collective_args, _lanes, _ns, _us, collective_info, kernel_name

COMPUTE_STREAM, FIRST_NCCL_STREAM = 7, 20
# CUDA's correlation ids are large numbers; tools size their columns from them (HTA stores event indices in a
# column typed like the correlations, so small ids would overflow it).
FIRST_CORRELATION = 1 << 20
# device events (kernels and annotations, about 1 kB of JSON each) in all the files at most: past it, where ranks
# are copies of simulated ones, only the simulated ranks get a file (ranks.txt says who each one stands for)
RANK_TRACE_BUDGET = 4_000_000


def device_events(acts, rank: int) -> list:
    """(start_ns, end_ns, name, activity, kind) of what rank `rank` runs: its kernels (kind "comm" or "compute")
    and the annotations over them, in time order."""
    out = []
    for a in acts:
        s, e = _ns(a.start), _ns(a.end)
        if a.kind == "collective" and a.rank == rank:
            info = collective_info(a.tags)
            if info is not None:
                out.append((s, e, kernel_name(info), a, "comm"))
        elif a.kind == "compute" and a.rank == rank and e > s:
            out.append((s, e, a.label or "compute", a, "annotation" if "annotation" in a.tags else "compute"))
        elif a.kind == "p2p" and rank in (a.rank, a.peer) and a.peer != a.rank:
            # a point-to-point transfer: NCCL runs it as a SendRecv kernel on both ends
            out.append((s, e, "ncclDevKernel_SendRecv", a, "comm"))
    out.sort(key=lambda x: (x[0], -x[1], x[2]))
    return out


def _comm_args(a, rank: int, rename) -> dict:
    """PyTorch's comm arguments of a collective or p2p kernel on `rank` (its peers renamed by `rename`)."""
    if a.kind == "p2p":
        ends = sorted({int(rename[a.rank]), int(rename[a.peer])})
        return {"Collective name": "send" if rename[a.rank] == rank else "recv", "bytes": int(a.nbytes),
                "Process Group Ranks": str(ends), "Group size": 2}
    info = collective_info(a.tags)
    args = _collective_args(a, info)
    group = list(a.group or (a.rank,))
    ranks = [int(rename[r]) for r in group]
    # a copy's groups are the layout's (TP, DP, ...) groups, whose ranks rise with the group rank: renaming shifts
    # each member along its axis, so list them in that order again
    args["Process Group Ranks"] = str(ranks if ranks == group else sorted(ranks))
    return args


def rank_trace(events, cluster, rank: int, world: int, backend: str = "nccl", rename=None,
               copy_of: int | None = None, about: dict | None = None) -> dict:
    """The Kineto-style trace of `rank` from `events` (device_events of it, or of the rank it is a copy of, whose
    ranks `rename` maps to this one's); `about`: what the workload's report says of this GPU, under "simcomm"."""
    rename = np.arange(max(world, cluster.num_ranks)) if rename is None else rename
    device = cluster.local_rank(rank)
    host = 100_000 + rank  # the rank's host process id (any number unique per rank)
    comm = [i for i, k in enumerate(events) if k[4] == "comm"]
    lanes = _lanes([(events[i][0], events[i][1]) for i in comm])  # concurrent collectives: separate streams
    stream_of = {i: FIRST_NCCL_STREAM + lane for i, lane in zip(comm, lanes)}
    out, flows = [], []
    for i, (s, e, name, a, kind) in enumerate(events):
        corr = FIRST_CORRELATION + i
        ts, dur = _us(s), _us(e - s)
        if kind == "annotation":
            out.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": device, "tid": COMPUTE_STREAM,
                        "ts": ts, "dur": dur, "args": {"External id": corr}})
            continue
        stream = stream_of.get(i, COMPUTE_STREAM)
        if kind == "comm":
            args = _comm_args(a, rank, rename)
            out.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": host, "tid": host,
                        "ts": ts, "dur": 0.0, "args": {"External id": corr, **args}})
        else:
            args = {}
            out.append({"ph": "X", "cat": "cpu_op", "name": f"aten::{name}", "pid": host, "tid": host,
                        "ts": ts, "dur": 0.0, "args": {"External id": corr}})
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": host, "tid": host,
                    "ts": ts, "dur": 0.0, "args": {"External id": corr, "correlation": corr}})
        out.append({"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur,
                    "args": {"External id": corr, "device": device, "stream": stream, "correlation": corr, **args}})
        flows.append({"ph": "s", "id": corr, "pid": host, "tid": host, "ts": ts, "cat": "ac2g", "name": "ac2g"})
        flows.append({"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": ts, "cat": "ac2g", "name": "ac2g",
                      "bp": "e"})
    meta = [{"name": "process_name", "ph": "M", "pid": host, "tid": 0, "args": {"name": f"rank {rank} host"}},
            {"name": "process_name", "ph": "M", "pid": device, "tid": 0, "args": {"name": f"GPU {device}"}},
            {"name": "thread_name", "ph": "M", "pid": host, "tid": host, "args": {"name": "main thread"}}]
    for stream in sorted({ev["tid"] for ev in out if ev["pid"] == device}):
        meta.append({"name": "thread_name", "ph": "M", "pid": device, "tid": stream,
                     "args": {"name": f"stream {stream}"}})
    ranks = list(range(world))
    trace = {"distributedInfo": {"backend": backend, "rank": rank, "world_size": world, "pg_count": 1,
                                 "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config":
                                                f"cuda:{backend}", "ranks": ranks, "group_size": world}]},
             "schemaVersion": 1,
             "deviceProperties": [{"id": device, "name": cluster.device.name,
                                   "totalGlobalMem": int(getattr(cluster.device, "memory_capacity", 0) or 0)}],
             "traceName": f"simcomm rank {rank}", "displayTimeUnit": "ms", "baseTimeNanoseconds": 0}
    if copy_of is not None and copy_of != rank:
        about = {"copy_of": copy_of, "note": "made from the simulated GPU's events, its peers renamed", **(about or {})}
    if about:
        trace["simcomm"] = about
    trace["traceEvents"] = meta + out + flows
    return trace


def rank_traces(activities, cluster, copies=None, about=None, budget: int = RANK_TRACE_BUDGET):
    """(rank, trace) for every rank that ran something, or for every rank of `copies` (made from the events of
    the rank each is a copy of; only for the simulated ones past `budget` device events in all); one at a time,
    in rank order. `about`: {simulated rank: what the report says of it}, written into its file and its copies'."""
    about = about or {}
    by_rank: dict[int, list] = {}
    for a in activities:
        if a.kind in ("collective", "compute", "p2p"):
            by_rank.setdefault(a.rank, []).append(a)
            if a.kind == "p2p" and a.peer >= 0 and a.peer != a.rank:
                by_rank.setdefault(a.peer, []).append(a)
    backend = "gloo" if cluster.device.kind == "cpu" else "nccl"
    if copies is None:
        world = max(by_rank, default=-1) + 1
        for r in sorted(by_rank):
            yield r, rank_trace(device_events(by_rank[r], r), cluster, r, world, backend, about=about.get(r))
        return
    world = len(copies.ranks)
    events = {s: device_events(by_rank.get(s, []), s) for s in copies.sources}
    for r in written_ranks(copies, {s: len(e) for s, e in events.items()}, budget):
        src = copies.source(r)
        yield r, rank_trace(events[src], cluster, r, world, backend, copies.rename(r), src, about.get(src))


def written_ranks(copies, events: dict[int, int], budget: int = RANK_TRACE_BUDGET) -> list[int]:
    """Every rank of `copies`, or only the simulated ones where all would hold more than `budget` device events
    (`events`: how many each simulated rank has)."""
    total = sum(events[copies.source(r)] for r in copies.ranks)
    return list(copies.ranks) if total <= budget else sorted(copies.sources)


def write_rank_traces(activities, cluster, directory, copies=None, about=None,
                      budget: int = RANK_TRACE_BUDGET) -> list[Path]:
    """One `rank<N>.json` per rank in `directory` (what HTA's TraceAnalysis(trace_dir=...) loads); `copies`,
    `about` and `budget` as rank_traces takes them. With `copies`, ranks.txt says which simulated rank each rank
    of the layout is a copy of and which have a file."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, trace in rank_traces(activities, cluster, copies, about, budget):
        path = out / f"rank{rank}.json"
        # HTA finds each file's rank with the regex '"rank":\\s+(\\d+)', so keep the space after the colon, and
        # distributedInfo comes first.
        path.write_text(json.dumps(trace, separators=(",", ": ")))
        paths.append(path)
    if copies is not None:  # not .json: HTA would read it as a trace of rank 0
        have = {int(p.stem[4:]) for p in paths}
        lines = [f"{copies.describe()}.", f"{len(have)} of {len(copies.ranks)} ranks have a file"
                 + ("." if len(have) == len(copies.ranks) else f" (more would exceed {budget:,} device events):"
                    " each other rank's trace is its simulated rank's, its peers renamed.")]
        lines += [f"rank {r}: " + ("simulated" if copies.source(r) == r else f"copy of rank {copies.source(r)}")
                  + ("" if r in have else " (no file)") for r in copies.ranks]
        (out / "ranks.txt").write_text("\n".join(lines) + "\n")
    return paths
