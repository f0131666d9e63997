"""Chrome/Perfetto traces: NCCL kernel names, comm args, nesting tracks, flows, links, determinism."""
import json
import re

from simcomm.engine import Activity
from simcomm.hardware import build_cluster
from simcomm.session import Session
from simcomm.report.perfetto import _lanes, chrome_trace, collective_info, kernel_name, nesting_errors
from simcomm.workloads.perf import run_perf


def perf_trace(kind="all_reduce", sizes=(1 << 10, 1 << 24), algorithms=("ring",)):
    c = build_cluster("hgx-h100")
    sim = Session(c, detail="flows")
    run_perf(sim, [kind], list(sizes), algorithms=list(algorithms))
    return chrome_trace(sim.sim.recorder.activities(), c, title="t", link_loads=sim.sim.recorder.link_loads), c


def info(kind, algorithm, protocol, dtype=None, op=None, **extra):
    tags = {"collective": kind, "algorithm": algorithm, "protocol": protocol, **extra}
    if dtype:
        tags.update(dtype=dtype, op=op)
    return collective_info(tags)


def test_kernel_names_follow_nccl():
    assert kernel_name(info("all_reduce", "ring", "LL", "float32", "sum")) == "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    assert kernel_name(info("reduce_scatter", "ring", "Simple", "bfloat16", "avg")) == \
        "ncclDevKernel_ReduceScatter_PreMulSum_bf16_RING_Simple"
    assert kernel_name(info("all_gather", "ring", "LL128", "float16", "sum")) == "ncclDevKernel_AllGather_RING_LL128"
    assert kernel_name(info("all_to_all", "direct", "Simple")) == "ncclDevKernel_SendRecv"
    assert kernel_name(info("all_reduce", "tree", "LL")) == "ncclDevKernel_AllReduce_TREE_LL"
    assert info("all_reduce", "ring", "LL", "int32", "max", group="dp0")["group"] == "dp0"
    assert collective_info({"phase": "forward"}) is None


def test_trace_is_valid_and_nests():
    trace, c = perf_trace()
    text = json.dumps(trace)
    assert json.loads(text)["displayTimeUnit"] == "ns"
    assert nesting_errors(trace) == []
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) == 2 * 8
    assert all(re.match(r"^ncclDevKernel_AllReduce_Sum_f32_RING_(LL|LL128|Simple)$", k["name"]) for k in kernels)
    big = [k for k in kernels if k["args"]["bytes"] == 1 << 24][0]
    assert big["args"]["In msg nelems"] == big["args"]["Out msg nelems"] == (1 << 24) // 4
    assert big["args"]["Group size"] == 8 and big["args"]["dtype"] == "Float"
    assert big["args"]["Collective name"] == "allreduce"
    assert big["args"]["Process Group Ranks"] == str(list(range(8)))


def test_all_gather_message_sizes():
    trace, _ = perf_trace("all_gather", sizes=(1 << 20,))
    k = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"][0]
    assert k["args"]["Out msg nelems"] == (1 << 20) // 4 and k["args"]["In msg nelems"] == (1 << 20) // 32


def test_metadata_flows_and_link_counters():
    trace, c = perf_trace()
    ev = trace["traceEvents"]
    named_pids = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    named_tracks = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    for e in ev:
        if e["ph"] == "X":
            assert e["pid"] in named_pids and (e["pid"], e["tid"]) in named_tracks
    starts = {e["id"] for e in ev if e["ph"] == "s"}
    ends = {e["id"] for e in ev if e["ph"] == "f"}
    assert starts and starts == ends
    sends = [e for e in ev if e["ph"] == "X" and e["cat"] == "transfer" and e["name"].startswith("all_reduce")]
    assert len(starts) == len(sends)
    counters = [e for e in ev if e["ph"] == "C"]
    assert counters and max(e["args"]["GB/s"] for e in counters) > 100
    assert "n0.gpu0->n0.nvswitch" in {e["name"].split(" ", 1)[1] for e in counters}


def test_overlapping_events_get_their_own_tracks():
    c = build_cluster("hgx-h100")
    acts = [Activity(0, "send", 0.0, 2e-6, 1, "a", 1), Activity(0, "send", 1e-6, 3e-6, 1, "b", 2),
            Activity(0, "send", 0.5e-6, 1.5e-6, 1, "c", 3), Activity(0, "send", 2e-6, 4e-6, 1, "d", 4)]
    trace = chrome_trace(acts, c)
    assert nesting_errors(trace) == []
    tid = {e["name"]: e["tid"] for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 0}
    assert tid["a"] == tid["c"] == tid["d"] and tid["b"] != tid["a"]
    assert _lanes([(0, 10), (0, 10), (2, 12)]) == [0, 0, 1]


def test_nesting_checker_catches_overlap():
    bad = {"traceEvents": [{"ph": "X", "name": "a", "pid": 0, "tid": 1, "ts": 0, "dur": 2},
                           {"ph": "X", "name": "b", "pid": 0, "tid": 1, "ts": 1, "dur": 2},
                           {"ph": "s", "id": 7, "pid": 0, "tid": 1, "ts": 0}]}
    errors = nesting_errors(bad)
    assert len(errors) == 2 and "without nesting" in errors[0] and "flow 7" in errors[1]


def test_trace_is_deterministic():
    a, _ = perf_trace(sizes=(1 << 16,))
    b, _ = perf_trace(sizes=(1 << 16,))
    assert json.dumps(a) == json.dumps(b)


def test_cpu_processes_get_gloo_names():
    c = build_cluster("cpu-host")
    sim = Session(c, detail="flows")
    run_perf(sim, ["all_reduce"], [1 << 16])
    trace = chrome_trace(sim.sim.recorder.activities(), c)
    ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    assert len(ops) == 4 and {e["name"] for e in ops} == {"gloo:all_reduce"} and nesting_errors(trace) == []
    assert not any(e["name"].startswith("nccl") for e in trace["traceEvents"])


def test_quickstart_trace_has_no_orphan_flow_ends(tmp_path):
    """Issue 11: the legacy viewer dropped 42 of 336 arrows, whose end came before their start in the file. The
    quickstart with the ring forced, so every size draws its 112 arrows whatever the tuner picks (with the fitted
    presets it picks NVLS, whose flows go to the switch and draw none)."""
    from pathlib import Path

    from simcomm.report.perfetto import orphan_flow_ends
    from simcomm.scenario import load_scenario
    from simcomm.workloads import run_scenario
    quickstart = (Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml").read_text()
    (tmp_path / "ring.yaml").write_text(quickstart + "model:\n  algorithm: {all_reduce: ring}\n")
    result = run_scenario(load_scenario(tmp_path / "ring.yaml"))
    trace = chrome_trace(result.timeline, result.cluster)
    starts = [e for e in trace["traceEvents"] if e["ph"] == "s"]
    ends = {e["id"]: e for e in trace["traceEvents"] if e["ph"] == "f"}
    assert len(starts) == len(ends) == 11 * 112 and orphan_flow_ends(trace) == [] and nesting_errors(trace) == []
    for s in starts:  # each arrow goes from the send's start forward to inside the receive
        assert ends[s["id"]]["ts"] >= s["ts"]
    bad = {"traceEvents": [{"ph": "f", "id": 1, "cat": "transfer", "ts": 1.0, "bp": "e"},
                           {"ph": "s", "id": 1, "cat": "transfer", "ts": 1.0}]}
    assert orphan_flow_ends(bad) == [1] and "flow 1: its end comes before its start" in nesting_errors(bad)
