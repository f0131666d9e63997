"""Chrome/Perfetto trace JSON from a timeline: a process per rank (GPU or CPU process), tracks per stream, flow
arrows for transfers, and counter tracks of link load.

Collectives are named as NCCL's kernels ("ncclDevKernel_AllReduce_Sum_f32_RING_LL") with PyTorch's comm args, so
tools such as Holistic Trace Analysis recognise them (regex ^nccl). Events on one track nest: overlapping events
that do not nest go to another track of the same kind. CPU processes (gloo) get "gloo:all_reduce" ops instead.
Times are whole nanoseconds (ts in us, as the format says).
"""
from __future__ import annotations

from ..vocab import DTYPES, TORCH_NAMES
from .links import link_usage

LINKS_PID = 1_000_000
_KERNEL = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
           "broadcast": "Broadcast", "reduce": "Reduce", "barrier": "AllReduce"}
_OP = {"sum": "Sum", "prod": "Prod", "min": "Min", "max": "Max"}
_TRACKS = {"collective": "NCCL kernels", "send": "sends", "recv": "recvs", "hbm": "HBM", "compute": "compute"}
_CAT = {"collective": "kernel", "send": "transfer", "recv": "transfer", "hbm": "memory", "compute": "compute"}


def collective_info(tags) -> dict | None:
    """What a collective record's tags say about it (kind, algorithm, protocol, dtype, op, group); None for other
    records."""
    if tags.get("collective") not in TORCH_NAMES or "algorithm" not in tags:
        return None
    return {"group": tags.get("group", ""), "kind": tags["collective"], "algorithm": tags["algorithm"],
            "protocol": tags["protocol"], "dtype": tags.get("dtype"), "op": tags.get("op")}


def kernel_name(info: dict) -> str:
    """NCCL's device kernel name; dtype and op appear only when known."""
    kind = info["kind"]
    if kind not in _KERNEL:
        return "ncclDevKernel_SendRecv"
    algo, proto = info["algorithm"].upper(), info["protocol"]
    parts = [_KERNEL[kind]]
    if kind in ("all_reduce", "reduce_scatter", "reduce", "barrier") and info.get("dtype"):
        dt = info["dtype"]
        op = _OP.get(info["op"]) or ("PreMulSum" if dt.startswith(("float", "bf", "fp")) else "SumPostDiv")
        parts += [op, DTYPES[dt].kernel if dt in DTYPES else dt]
    return "_".join(["ncclDevKernel"] + parts + [algo, proto])


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def _us(ns: int) -> float:
    # +0.1 ns so a reader that truncates us*1000 to whole ns still gets `ns` back.
    return round(ns / 1000 + 0.0001, 4)


def _lanes(events: list) -> list[int]:
    """A lane per event so that events sharing a lane nest: greedy, in (start, -end) order."""
    order = sorted(range(len(events)), key=lambda i: (events[i][0], -events[i][1], i))
    stacks: list[list[int]] = []
    lane = [0] * len(events)
    for i in order:
        s, e = events[i][0], events[i][1]
        for k, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or stack[-1] >= e:
                stack.append(e)
                lane[i] = k
                break
        else:
            stacks.append([e])
            lane[i] = len(stacks) - 1
    return lane


def _collective_args(a, info: dict) -> dict:
    ranks = list(a.group or (a.rank,))
    n = len(ranks)
    dt = info.get("dtype")
    size = DTYPES[dt].itemsize if dt in DTYPES else None
    total = int(a.nbytes // size) if size else None
    shard = total // n if total is not None and n else None
    kind = info["kind"]
    elems_in, elems_out = total, total
    if kind == "all_gather":
        elems_in = shard
    elif kind == "reduce_scatter":
        elems_out = shard
    args = {"Collective name": TORCH_NAMES[kind], "In msg nelems": elems_in, "Out msg nelems": elems_out,
            "Group size": n, "dtype": DTYPES[dt].torch if dt in DTYPES else "unknown",
            "Process Group Ranks": str(ranks), "algorithm": info["algorithm"], "protocol": info["protocol"],
            "bytes": int(a.nbytes)}
    if info.get("group"):
        args["Process Group Name"] = info["group"]
    return args


def chrome_trace(activities, cluster, *, title: str = "simcomm", max_events: int = 400_000,
                 link_loads=None) -> dict:
    """The trace as a dict ready for json.dump; with `link_loads` (a Recorder's), counter tracks of the most
    utilised links' loads as the flow engine assigned them."""
    acts = list(activities)
    gloo = cluster.device.kind == "cpu"  # CPU processes: gloo ops on the host, as PyTorch names them
    tracks_named = {**_TRACKS, "collective": "gloo collectives", "hbm": "memory"} if gloo else _TRACKS
    dropped = 0
    if len(acts) > max_events:  # keep collectives and spans, drop per-flow detail
        keep = [a for a in acts if a.kind != "send"]
        dropped, acts = len(acts) - len(keep), keep
    found = _Tracks(cluster, gloo)
    for a in acts:
        found.add(a)
    out, names, arrows = found.events(tracks_named)
    counters = _link_counters(link_loads, cluster)
    meta = _process_names(found, cluster) + _thread_names(names)
    if counters:
        meta += [{"name": "process_name", "ph": "M", "pid": LINKS_PID, "tid": 0, "args": {"name": "links (GB/s)"}},
                 {"name": "process_sort_index", "ph": "M", "pid": LINKS_PID, "tid": 0,
                  "args": {"sort_index": LINKS_PID}}]
    other = {"generator": "simcomm", "title": title, "cluster": cluster.name, "ranks": cluster.num_ranks}
    if dropped:
        other["dropped_transfers"] = dropped
    return {"traceEvents": meta + out + arrows + found.instants + counters, "displayTimeUnit": "ns",
            "otherData": other}


class _Tracks:
    """Activities sorted onto (pid, track kind) tracks, with the instants, the send -> recv arrows and each rank's
    pipeline stage where the records say."""

    def __init__(self, cluster, gloo: bool):
        self.cluster, self.gloo = cluster, gloo
        self.tracks: dict[tuple[int, str], list] = {}  # (pid, track) -> [(start_ns, end_ns, event, flow id)]
        self.stage_of: dict[int, int] = {}
        self.instants: list[dict] = []
        self.flow_id = 0

    def _name_and_args(self, a) -> tuple[str, dict]:
        if a.kind == "collective":
            info = collective_info(a.tags)
            name = (f"gloo:{info['kind']}" if self.gloo else kernel_name(info)) if info else a.label
            return name, (_collective_args(a, info) if info else {"bytes": a.nbytes})
        args = {"bytes": a.nbytes}
        if a.tags:  # stage, microbatch, layer, phase, ... of a training step's blocks
            args = {("flops" if a.kind == "compute" else "bytes"): a.nbytes,
                    **{k: v for k, v in a.tags.items() if isinstance(v, (int, float, str, bool))}}
        return a.label or a.kind, args

    def add(self, a) -> None:
        s, e = _ns(a.start), _ns(a.end)
        name, args = self._name_and_args(a)
        if e <= s and a.kind not in _TRACKS:
            self.instants.append({"name": name, "cat": a.kind, "ph": "i", "s": "t", "pid": a.rank, "tid": 0,
                                  "ts": _us(s), "args": {"peer": a.peer} if a.peer >= 0 else {}})
            return
        fid = None
        if a.kind == "send" and 0 <= a.peer != a.rank:
            self.flow_id += 1
            fid = self.flow_id
            args = {**args, "peer": a.peer, "links": [self.cluster.link_name(j) for j in a.links]}
            ev = {"name": f"recv from {a.rank}", "cat": "transfer", "ph": "X", "args": {"bytes": a.nbytes,
                                                                                          "peer": a.rank}}
            self.tracks.setdefault((a.peer, "recv"), []).append((s, e, ev, fid))
        cat = "cpu_op" if self.gloo and a.kind == "collective" else _CAT.get(a.kind, a.kind)
        ev = {"name": name, "cat": cat, "ph": "X", "args": args}
        self.tracks.setdefault((a.rank, _track(a)), []).append((s, e, ev, fid))
        if "stage" in a.tags and a.rank not in self.stage_of:
            self.stage_of[a.rank] = a.tags["stage"]

    def events(self, tracks_named: dict) -> tuple[list, dict, list]:
        """The complete events with their thread ids (overlapping spans on lanes of their own), each thread's
        name, and the flow arrows."""
        out, names = [], {}
        flows: dict[int, list] = {fid: [None, None] for fid in range(1, self.flow_id + 1)}
        kinds = list(_TRACKS) + sorted({k for _, k in self.tracks if k not in _TRACKS}, key=_stream_order)
        next_tid: dict[int, int] = {}
        for (pid, kind) in sorted(self.tracks, key=lambda t: (t[0], kinds.index(t[1]))):
            items = self.tracks[(pid, kind)]
            lanes = _lanes(items)
            base = next_tid.get(pid, 1)
            for (s, e, ev, fid), lane in zip(items, lanes):
                tid = base + lane
                out.append({**ev, "pid": pid, "tid": tid, "ts": _us(s), "dur": _us(e - s)})
                if fid is not None:
                    flows[fid][kind == "recv"] = _flow_end(fid, pid, tid, s, e, kind == "recv")
            label = tracks_named.get(kind) or _stream_name(kind)
            for lane in range(max(lanes) + 1):
                names[(pid, base + lane)] = label if lane == 0 else f"{label} #{lane + 1}"
            next_tid[pid] = base + max(lanes) + 1
        # Each arrow's start precedes its end in the file: the legacy viewer drops an end it meets first.
        arrows = [ev for pair in flows.values() for ev in pair if ev is not None]
        return out, names, arrows


def _process_names(found: _Tracks, cluster) -> list[dict]:
    meta = []
    for pid in sorted({p for p, _ in found.tracks} | {i["pid"] for i in found.instants}):
        stage = f" pipeline stage {found.stage_of[pid]}" if pid in found.stage_of else ""
        meta += [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                  "args": {"name": f"rank {pid} ({cluster.rank_name(pid)})" + stage}},
                 {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    return meta


def _thread_names(names: dict) -> list[dict]:
    meta = []
    for (pid, tid), label in sorted(names.items()):
        meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}},
                 {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}]
    return meta


_STREAMS = ("compute", "tp", "cp", "pp", "dp", "mp")  # a training step's streams, in the order they are drawn
_STREAM_NAMES = {"tp": "tensor parallel", "cp": "context parallel", "pp": "pipeline p2p", "dp": "data parallel",
                 "mp": "model parallel (grad norm)"}


def _track(a) -> str:
    """The track kind of an activity: its kind, split by parallel axis when its tags name one."""
    axis = a.tags.get("axis") if a.kind in ("collective", "p2p", "send", "recv") else None
    return f"{a.kind}:{axis}" if axis else a.kind


def _stream_order(kind: str):
    axis = kind.partition(":")[2]
    return (_STREAMS.index(axis) if axis in _STREAMS else len(_STREAMS), kind)


def _stream_name(kind: str) -> str:
    base, _, axis = kind.partition(":")
    if not axis:
        return _TRACKS.get(base, base)
    what = {"collective": "NCCL", "p2p": "p2p", "send": "sends", "recv": "recvs"}.get(base, base)
    return f"{what} {_STREAM_NAMES.get(axis, axis)}"


def _flow_end(fid: int, pid: int, tid: int, start_ns: int, end_ns: int, arriving: bool) -> dict:
    """An arrow from where the data leaves (the send's start) to where it lands (1 ns before the receive's end,
    inside that slice, so viewers bind it there and it never points back in time)."""
    ts = max(start_ns, end_ns - 1) if arriving else start_ns
    ev = {"name": "transfer", "cat": "transfer", "id": fid, "pid": pid, "tid": tid, "ts": _us(ts)}
    return {**ev, "ph": "f", "bp": "e"} if arriving else {**ev, "ph": "s"}


def _link_counters(link_loads, cluster, max_links: int = 64) -> list[dict]:
    """A counter track per link (the `max_links` most utilised), named "#NN link" so that viewers, which sort
    counter tracks by name, list them most utilised first."""
    events = []
    for i, u in enumerate(link_usage(link_loads, cluster)[:max_links], 1):
        name = f"#{i:02d} {u.name}"
        for t, r in zip(u.times.tolist(), u.rates.tolist()):
            events.append({"name": name, "ph": "C", "pid": LINKS_PID, "tid": 0, "ts": _us(_ns(t)),
                           "args": {"GB/s": round(r / 1e9, 6)}})
    return events


def nesting_errors(trace: dict) -> list[str]:
    """Problems that would stop a viewer: complete events that overlap without nesting on one track, negative or
    non-finite times, and flow arrows without both ends. Empty when the trace is sound."""
    import math
    errors, tracks, flows = [], {}, {}
    for ev in trace.get("traceEvents", []):
        ph = ev.get("ph")
        if ph in ("s", "f"):
            flows.setdefault(ev.get("id"), set()).add(ph)
        if ph != "X":
            continue
        ts, dur = ev.get("ts"), ev.get("dur")
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (ts, dur)) or dur < 0:
            errors.append(f"bad ts/dur in {ev.get('name')!r}: {ts}, {dur}")
            continue
        start = round(ts * 1000)
        tracks.setdefault((ev.get("pid"), ev.get("tid")), []).append((start, start + round(dur * 1000), ev["name"]))
    for (pid, tid), events in tracks.items():
        stack: list = []
        for s, e, name in sorted(events, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1][0] <= s:
                stack.pop()
            if stack and stack[-1][0] < e:
                errors.append(f"pid {pid} tid {tid}: {name!r} [{s}, {e}] ns overlaps {stack[-1][1]!r} "
                              f"(ends {stack[-1][0]}) without nesting")
            stack.append((e, name))
    errors += [f"flow {fid} has only {sorted(ends)}" for fid, ends in flows.items() if ends != {"s", "f"}]
    errors += [f"flow {fid}: its end comes before its start" for fid in orphan_flow_ends(trace)]
    return errors


def orphan_flow_ends(trace: dict) -> list:
    """Ids of flow ends a viewer drops: an end with no start before it in the file, or earlier than its start."""
    started: dict = {}
    orphans = []
    for ev in trace.get("traceEvents", []):
        key = (ev.get("cat"), ev.get("id"))
        if ev.get("ph") == "s":
            started[key] = ev["ts"]
        elif ev.get("ph") == "f" and (key not in started or ev["ts"] < started[key]):
            orphans.append(ev.get("id"))
    return orphans
