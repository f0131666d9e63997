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
    assert "layouts tried" in out and "simulated" in out and out.count(" tp") >= 5
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
    # simulated layouts had their schedule bound; the others that fit at least their compute bound
    assert all(r["bound_kind"] == "schedule" for r in doc["rows"] if "step_time" in r)
    kinds = [r["bound_kind"] for r in doc["rows"] if r.get("fits")]
    assert len(kinds) == doc["fit_in_memory"] and kinds.count("schedule") == doc["schedule_bounds"] >= 1


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
