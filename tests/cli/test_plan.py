"""simcomm plan: a table, JSON and a plot of a training scenario's layouts; clear errors."""
import json

from simcomm.cli import main

SCENARIO = """\
name: small-plan
cluster: {preset: hgx-h100, nodes: 2}
workload: {kind: training, model: llama3-8b, num_layers: 8, global_batch_size: 16}
"""


def test_plan_prints_the_best_layouts_and_writes_a_plot(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    plot = tmp_path / "plan.png"
    assert main(["plan", str(path), "--jobs", "1", "--mbs", "1,2", "--recompute", "none,full", "--top", "5",
                 "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "layouts tried" in out and "simulated" in out and out.count("--tensor-model-parallel-size") >= 5
    assert "v (virtual stages)" in out and "recompute" in out and "the scenario's own layout" in out
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_plan_json_lists_every_layout(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["plan", str(path), "--jobs", "1", "--tp", "2,4", "--schedules", "1f1b", "--recompute", "none",
                 "--mbs", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["enumerated"] == len(doc["rows"]) > 0 and {r["tp"] for r in doc["rows"]} == {2, 4}
    best = doc["rows"][0]
    assert best["step_time"] >= best["bound"] > 0 and doc["best_is_proven"]
    # simulated layouts had their schedule and interference bounds; the others that fit at least their compute bound
    assert all(r["bound_kind"] == "interference" for r in doc["rows"] if "step_time" in r)
    kinds = [r["bound_kind"] for r in doc["rows"] if r.get("fits")]
    assert len(kinds) == doc["fit_in_memory"]
    assert kinds.count("schedule") + kinds.count("interference") == doc["schedule_bounds"] >= 1
    assert kinds.count("passes") == doc["passes_bounds"]


def test_plan_errors(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizes: [1MiB]}\n")
    assert main(["plan", str(path)]) == 2
    assert "needs a training scenario" in capsys.readouterr().err
    good = tmp_path / "s.yaml"
    good.write_text(SCENARIO)
    assert main(["plan", str(good), "--tp", "two"]) == 2
    assert "whole numbers" in capsys.readouterr().err
    assert main(["plan", str(good), "--recompute", "some"]) == 2
    assert "unknown recomputation" in capsys.readouterr().err


def test_plan_for_megatron_prints_its_arguments_and_ranks_the_scenarios_own_layout(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("global_batch_size: 16}", "global_batch_size: 16, tensor_model_parallel_size: 2, "
                                     "pipeline_model_parallel_size: 2, sequence_parallel: true}"))
    assert main(["plan", str(path), "--jobs", "1", "--framework", "megatron", "--mbs", "1", "--recompute", "none",
                 "--top", "4"]) == 0
    out = capsys.readouterr().out
    runs = [line for line in out.splitlines() if line.startswith("#") and ": " in line]
    assert runs[0].startswith("#1") and "Megatron-LM: --tensor-model-parallel-size" in runs[0]
    assert "--pipeline-model-parallel-size" in runs[0] and "--global-batch-size 16" in runs[0]
    own = next(line for line in out.splitlines() if line.startswith("the scenario's own layout"))
    assert "tp2 pp2" in own and ("ranks #" in own or "it is the best" in own)
    assert "GPipe" not in out  # Megatron-LM has no GPipe schedule
    assert "step w/o interference (rank)" in out and "(#1)" in out


def test_plan_for_torchtitan_prints_its_toml_keys(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["plan", str(path), "--jobs", "1", "--framework", "torchtitan", "--mbs", "1", "--recompute",
                 "none", "--tp", "2,4", "--top", "3", "--no-overlap-check", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["framework"] == "torchtitan" and {r["zero"] for r in doc["rows"]} <= {0, 3}
    assert doc["rows"][0]["run"].startswith("torchtitan: [parallelism]") and "run" not in doc["rows"][-1]
    assert doc["own"]["run"].startswith("torchtitan") and doc["own"]["candidate"] in (True, False)
    assert main(["plan", str(path), "--jobs", "1", "--framework", "torchtitan", "--mbs", "1", "--recompute",
                 "none", "--tp", "2,4", "--top", "3", "--no-overlap-check"]) == 0
    out = capsys.readouterr().out
    assert "torchtitan: [parallelism] data_parallel_replicate_degree" in out
    assert "tensor_parallel_degree" in out and '[activation_checkpoint] mode = "none"' in out


def test_plan_world_size_and_batch_errors(tmp_path, capsys):
    good = tmp_path / "s.yaml"
    good.write_text(SCENARIO)
    for bad in ("0", "17", "100000000"):
        assert main(["plan", str(good), "--world-size", bad]) == 2
        assert "--world-size" in capsys.readouterr().err
    big = tmp_path / "w.yaml"
    big.write_text(SCENARIO.replace("num_layers: 8,", "num_layers: 8, world_size: 32,"))
    assert main(["plan", str(big)]) == 2
    err = capsys.readouterr().err
    assert "workload.world_size" in err and "world_size 32 is more than" in err and "Traceback" not in err
    huge = tmp_path / "h.yaml"
    huge.write_text(SCENARIO.replace("global_batch_size: 16", "global_batch_size: 100000000"))
    assert main(["plan", str(huge), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "workload.global_batch_size" in err and "micro-batches" in err and "Traceback" not in err
    assert main(["validate", str(huge)]) == 2  # what validate accepts, run runs (1e8 sequences: hours)
    assert "global_batch_size (100,000,000) makes" in capsys.readouterr().err
    odd = tmp_path / "o.yaml"  # the scenario's own layout is checked when it loads
    odd.write_text(SCENARIO.replace("global_batch_size: 16", "global_batch_size: 7"))
    assert main(["plan", str(odd), "--jobs", "1"]) == 2
    assert "workload.global_batch_size: global_batch_size (7) is not divisible" in capsys.readouterr().err
    assert main(["plan", str(good), "--jobs", "1", "--world-size", "13"]) == 2  # 13 GPUs: dp 13 does not divide 16
    assert "workload.global_batch_size: global_batch_size 16: no layout" in capsys.readouterr().err


def test_plan_on_a_prime_world_size(tmp_path, capsys):
    """13 GPUs: tp, cp and pp 1 (13 is prime and more than the layers), dp 13 over a batch of 13."""
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("global_batch_size: 16", "global_batch_size: 13, world_size: 13"))
    assert main(["plan", str(path), "--jobs", "1", "--recompute", "none", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"] == 13 and {(r["tp"], r["pp"], r["cp"], r["dp"]) for r in doc["rows"]} == {(1, 1, 1, 13)}
    assert doc["rows"][0]["step_time"] > 0


def test_plan_on_ray_prints_what_local_workers_find(tmp_path, capsys, fake_ray):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    args = ["plan", str(path), "--tp", "2,4", "--schedules", "1f1b", "--recompute", "none", "--mbs", "1", "--json"]
    assert main(args + ["--jobs", "1"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main(args + ["--ray", "auto"]) == 0
    assert json.loads(capsys.readouterr().out) == local and fake_ray.inits[0]["address"] == "auto"


def test_plan_on_ray_without_ray_says_what_to_install(tmp_path, capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["plan", str(path), "--ray"]) == 2
    assert "pip install 'simcomm[ray]'" in capsys.readouterr().err


def test_plan_over_the_newer_schedules_names_them_in_its_table(tmp_path, capsys):
    """zero-bubble and DualPipe rows print with their names (a dualpipe row raised KeyError while printing)."""
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["plan", str(path), "--jobs", "1", "--tp", "1,2", "--pp", "2", "--mbs", "1", "--recompute", "none",
                 "--schedules", "zb_h1,zbv,dualpipe,dualpipev", "--top", "40"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("ZB-H1", "ZB-V", "DualPipe ", "DualPipeV")), out
