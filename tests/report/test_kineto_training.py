"""Per-rank traces of a training step (issue 25): every rank of the layout gets a file holding the kernels its GPU
ran (each pass once, the TP collectives on every TP rank), and Holistic Trace Analysis' temporal breakdown, kernel
breakdown and overlap of each rank equal the report's breakdown of its pipeline stage:
  compute     = forward + backward + recompute + optimizer + interference
  non-compute = exposed tp + cp + pp + dp + the GPU's own communication while it waited for work
  idle        = the bubble less that communication, less the waits before its first and after its last kernel."""
import json
import textwrap

import pytest
from hta.trace_analysis import TraceAnalysis

from simcomm.cli import main
from simcomm.engine.trace import length, overlap, union
from simcomm.parallel.dims import ParallelDims


COMPUTE = ("forward", "backward", "recompute", "optimizer", "interference")
COMM = ("tp", "cp", "pp", "dp")

# 16 GPUs on 2 nodes: TP 4 with sequence parallelism, interleaved pipeline of 2 stages x 2 chunks, DP 2 with the
# distributed optimizer overlapping its reduce-scatters and gathers; compute and communication share the GPUs.
SCENARIO = """\
    cluster: {preset: hgx-h100, nodes: 2}
    workload:
      kind: training
      model: llama3-8b
      num_layers: 4
      seq_length: 2048
      tensor_model_parallel_size: 4
      pipeline_model_parallel_size: 2
      num_layers_per_virtual_pipeline_stage: 1
      sequence_parallel: true
      micro_batch_size: 1
      global_batch_size: 16
      use_distributed_optimizer: true
      overlap_grad_reduce: true
      overlap_param_gather: true
    outputs: {json: true}
    """


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The scenario's JSON report, its rank files and HTA's analysis of them."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # keep the traces' nanoseconds (HTA rounds to us)
    tmp = tmp_path_factory.mktemp("hta-training")
    path = tmp / "train.yaml"
    path.write_text(textwrap.dedent(SCENARIO))
    out = tmp / "out"
    assert main(["run", str(path), "--rank-traces", "--out", str(out)]) == 0
    report = json.loads((out / "result.json").read_text())
    files = {int(p.stem[4:]): json.loads(p.read_text()) for p in (out / "rank_traces").glob("rank*.json")}
    analysis = TraceAnalysis(trace_dir=str(out / "rank_traces"))
    yield report, files, analysis, path
    mp.undo()


def kernels(trace, category="kernel"):
    return [e for e in trace["traceEvents"] if e.get("cat") == category]


def totals(trace):
    """us from the file's own kernels: communication and compute (merged), their overlap, busy time and span."""
    comm = union([(k["ts"], k["ts"] + k["dur"]) for k in kernels(trace) if k["name"].startswith("nccl")])
    comp = union([(k["ts"], k["ts"] + k["dur"]) for k in kernels(trace) if not k["name"].startswith("nccl")])
    both = union(comm + comp)
    return {"comm": length(comm), "compute": length(comp), "overlap": overlap(comm, comp), "busy": length(both),
            "span": both[-1][1] - both[0][0], "kernels": len(kernels(trace))}


def test_every_rank_of_the_layout_gets_a_file_with_its_stage_figures(traced):
    report, files, analysis, _ = traced
    assert sorted(files) == sorted(analysis.t.get_ranks()) == list(range(16))
    stages = report["step"]["breakdown_per_stage"]
    for rank, trace in files.items():
        info, about = trace["distributedInfo"], trace["simcomm"]
        assert (info["rank"], info["world_size"]) == (rank, 16)
        assert about["breakdown"] == pytest.approx(stages[about["stage"]], rel=1e-12)
        assert about["step_time"] == pytest.approx(report["step"]["step_time"], rel=1e-12)
        assert ("copy_of" in about) == (rank not in (0, 8))  # one GPU of each stage was traced, the rest copy it


def test_hta_breakdowns_equal_the_reports_per_rank(traced):
    report, files, analysis, _ = traced
    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    sums = {"COMPUTATION": 0.0, "COMMUNICATION": 0.0, "COMPUTATION overlapping COMMUNICATION": 0.0}
    pieces, idle_comms = 0, []
    for rank, trace in files.items():
        about = trace["simcomm"]
        b, idle_comm = about["breakdown"], about["communication_while_idle"]
        own = totals(trace)
        ns = 1e-3 * own["kernels"]  # the files hold whole ns: each kernel's ends move by at most 0.5 ns
        row = temporal.loc[rank]
        assert row["compute_time(us)"] == pytest.approx(1e6 * sum(b[k] for k in COMPUTE), abs=ns)
        assert row["non_compute_time(us)"] == pytest.approx(1e6 * (sum(b[k] for k in COMM) + idle_comm), abs=ns)
        waits = about["step_time"] * 1e6 - row["kernel_time(us)"]  # before the first kernel and after the last
        assert -ns <= waits < 1e6 * b["bubble"]
        assert row["idle_time(us)"] == pytest.approx(1e6 * (b["bubble"] - idle_comm) - waits, abs=ns)
        assert 0 <= idle_comm < b["bubble"]
        idle_comms.append(idle_comm)
        assert row["kernel_time(us)"] == pytest.approx(own["span"], abs=0.01)
        assert overlap.loc[rank, "comp_comm_overlap_pctg"] == pytest.approx(100 * own["overlap"] / own["comm"],
                                                                           abs=0.01)
        # non-compute time is the communication that compute did not hide
        assert own["comm"] - own["overlap"] == pytest.approx(1e6 * (sum(b[k] for k in COMM) + idle_comm), abs=ns)
        sums["COMPUTATION"] += own["compute"] - own["overlap"]
        sums["COMMUNICATION"] += own["comm"] - own["overlap"]
        sums["COMPUTATION overlapping COMMUNICATION"] += own["overlap"]
        pieces += 2 * own["kernels"]
    assert max(idle_comms) > 0  # here some communication runs while a stage waits for work
    kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    kinds = dict(zip(kinds["kernel_type"], kinds["sum"]))
    assert kinds == pytest.approx(sums, abs=pieces)  # HTA sums over ranks, cutting each piece to whole us


def test_each_file_holds_what_its_gpu_ran(traced):
    _, files, _, _ = traced
    dims = ParallelDims(tp=4, pp=2, cp=1, dp=2)
    for rank, trace in files.items():
        compute = sorted((k["ts"], k["ts"] + k["dur"]) for k in kernels(trace) if k["args"]["stream"] == 7)
        # one compute stream, each pass once: no two compute kernels overlap
        assert all(a[1] <= b[0] + 1e-3 for a, b in zip(compute, compute[1:]))
        comms = [k for k in kernels(trace) if k["name"].startswith("nccl")]
        tp = [k for k in comms if k["args"]["Process Group Ranks"] == str(dims.group_of(rank, "tp").tolist())]
        assert tp and all(k["args"]["Group size"] == 4 for k in tp)
        dp = str(dims.group_of(rank, "dp").tolist())
        assert any(k["args"]["Process Group Ranks"] == dp for k in comms)  # its own replica group, renamed
        layers = kernels(trace, "gpu_user_annotation")
        assert layers and all(e["tid"] == 7 for e in layers)
    # a TP peer and a copy in another replica run the same kernels at the same times as the traced GPU
    times = {r: [(k["name"], k["ts"], k["dur"]) for k in kernels(files[r])] for r in (0, 3, 4, 8, 15)}
    assert times[0] == times[3] == times[4] and times[8] == times[15]


def test_past_the_budget_only_the_simulated_ranks_get_a_file(traced, tmp_path):
    from simcomm.report.kineto import write_rank_traces
    from simcomm.scenario import load_scenario
    from simcomm.workloads import run_scenario
    _, files, _, path = traced
    result = run_scenario(load_scenario(path))
    acts = result.activities(kernels=True)
    written = write_rank_traces(acts, result.cluster, tmp_path, result.copies, result.about_ranks(acts), budget=1)
    assert sorted(p.name for p in written) == ["rank0.json", "rank8.json"]
    assert json.loads(written[0].read_text()) == files[0]  # the same file as when every rank gets one
    index = (tmp_path / "ranks.txt").read_text().splitlines()
    assert index[1].startswith("2 of 16 ranks have a file (more would exceed 1 device events)")
    assert index[2:4] == ["rank 0: simulated", "rank 1: copy of rank 0 (no file)"] and index[-1] == \
        "rank 15: copy of rank 8 (no file)"
