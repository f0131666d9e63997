"""The training workload kind: Megatron names under `workload`, the `step` JSON object, reports, plots, traces,
and errors that name the key."""
import json

import pytest

from simcomm.cli import main
from simcomm.report.perfetto import chrome_trace, nesting_errors
from simcomm.scenario import ScenarioError, load_text
from simcomm.workloads import report_blocks, run_scenario, summarize

TEXT = """\
name: small
cluster: {preset: hgx-h100, nodes: 2}
workload:
  kind: training
  model: llama3-8b
  num_layers: 8
  tensor_model_parallel_size: 4
  pipeline_model_parallel_size: 2
  sequence_parallel: true
  global_batch_size: 8
  use_distributed_optimizer: true
  overlap_grad_reduce: true
"""


def test_a_training_scenario_runs_and_reports_the_step():
    res = run_scenario(load_text(TEXT, "small.yaml"))
    step = res.details["step"]
    assert step["step_time"] == pytest.approx(res.elapsed) and step["mfu"] > 0.1
    assert sum(step["breakdown"].values()) == pytest.approx(step["step_time"])
    assert set(step["memory"]["categories"]) >= {"weights", "gradients", "optimizer_state", "activations"}
    assert [r["stage"] for r in res.rows] == [0, 1]
    (s,) = summarize(res)
    assert s["step_time"] == step["step_time"] and s["peak_memory"] == step["memory"]["peak"]
    blocks = report_blocks(res)
    text = "\n".join(b for b in blocks if isinstance(b, str))
    assert "TFLOP/s per GPU" in text and "MFU" in text and "megatron" in text
    tables = [b for b in blocks if not isinstance(b, str)]
    assert tables[0][2][0][0] == "forward" and tables[1][1][0] == "stage"


def test_the_trace_is_a_gantt_chart_of_the_replica():
    res = run_scenario(load_text(TEXT, "small.yaml"))
    trace = chrome_trace(res.timeline, res.cluster)
    assert nesting_errors(trace) == []
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"compute", "NCCL tensor parallel", "p2p pipeline p2p", "NCCL data parallel"} <= threads
    names = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert "rank 8 (n1.gpu0) pipeline stage 1" in names
    layer_blocks = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] == "F0 L4"]
    assert layer_blocks and layer_blocks[0]["args"]["stage"] == 1 and layer_blocks[0]["args"]["microbatch"] == 0


def test_run_json_carries_the_step_and_writes_plots(tmp_path, capsys):
    path = tmp_path / "small.yaml"
    path.write_text(TEXT + "outputs: {plots: [schedule, breakdown]}\n")
    assert main(["run", str(path), "--json", "--out", str(tmp_path / "out")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["workload"] == "training" and doc["step"]["tokens_per_second"] > 0
    for name in ("schedule", "breakdown"):
        assert (tmp_path / "out" / f"{name}.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("change,path,message", [
    ("tensor_model_parallel_size: 3", "workload.tensor_model_parallel_size", "not divisible"),
    ("model: llama3-9b", "workload.model", "did you mean"),
    ("global_batch_size: 7", "workload.global_batch_size", "not divisible by micro_batch_size"),
    ("recompute_granularity: partial", "workload.recompute_granularity", "full"),
])
def test_bad_settings_name_the_key(change, path, message):
    key = change.split(":")[0]
    text = "\n".join(line for line in TEXT.splitlines() if not line.strip().startswith(key + ":"))
    text = text.replace("  kind: training", f"  kind: training\n  {change}")
    with pytest.raises(ScenarioError) as info:
        load_text(text, "bad.yaml")
    assert info.value.path == path and message in str(info.value)


def test_out_of_memory_is_a_simulation_failure(tmp_path, capsys):
    path = tmp_path / "oom.yaml"
    path.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: training, model: llama3-70b, "
                    "tensor_model_parallel_size: 8, global_batch_size: 8}\n")
    assert main(["run", str(path), "--no-files"]) == 1
    err = capsys.readouterr().err
    assert "out of memory: GPU 0" in err and "Traceback" not in err


def test_the_layout_is_built_once_per_run(monkeypatch):
    from simcomm.workloads import training
    calls = []
    real = training.build_layout
    monkeypatch.setattr(training, "build_layout", lambda *a: calls.append(a) or real(*a))
    res = run_scenario(load_text(TEXT, "small.yaml"))
    assert len(calls) == 1 and res.details["step"]["step_time"] > 0
