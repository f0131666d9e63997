"""The simcomm command: every subcommand, exit codes, JSON for scripts, and every scenario end to end."""
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simcomm.cli import main
from simcomm.report.perfetto import nesting_errors

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
PNG = b"\x89PNG\r\n\x1a\n"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- run / validate ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_runs_and_writes_its_outputs(capsys, tmp_path, path):
    code, out, err = run(capsys, "run", str(path), "--out", str(tmp_path), "--save-json")
    assert code == 0, err
    assert "Traceback" not in err and "scenario " in out and "simulated " in out
    from simcomm.scenario import load_scenario
    o = load_scenario(path).scenario.outputs
    doc = json.loads((tmp_path / (o.json or "result.json")).read_text())
    assert doc["rows"] and doc["elapsed"] > 0
    for row in doc["rows"]:
        for key in ("time", "busbw", "finish"):
            if key in row:
                assert isinstance(row[key], (int, float)) and math.isfinite(row[key]) and row[key] >= 0
    assert any(row.get("time", row.get("finish", 0)) > 0 for row in doc["rows"])
    assert all(f" {w}" not in out for w in ("nan", "inf"))
    if o.trace:
        trace = json.loads((tmp_path / o.trace).read_text())
        assert trace["traceEvents"] and nesting_errors(trace) == []
        if doc["workload"] != "program":
            assert any(e["name"].startswith("ncclDevKernel_") for e in trace["traceEvents"] if e["ph"] == "X")
    from simcomm.workloads import workload
    for name in o.plots:
        png = tmp_path / f"{name}.png"
        if name not in workload(doc["workload"]).plots:  # `plots: true` asks for every plot that applies
            continue
        assert png.read_bytes().startswith(PNG) and png.stat().st_size > 1000


def test_run_flags_and_json(capsys, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizes: [1MiB]}\n")
    code, out, _ = run(capsys, "run", str(scen), "--json", "--trace", "--plots", "--out", str(tmp_path / "o"))
    doc = json.loads(out)
    assert code == 0 and doc["scenario"] == "s" and set(doc["outputs"]) == {"trace", "busbw", "timeline", "links"}
    code, out, _ = run(capsys, "run", str(scen), "--no-files", "--out", str(tmp_path / "none"))
    assert code == 0 and not (tmp_path / "none").exists()


def test_malformed_scenario_exits_2_naming_file_line_and_key(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster:\n  preset: hgx-h100\n  nodez: 2\nworkload: {kind: perf, sizes: [1MiB]}\n")
    for cmd in ("run", "validate"):
        code, out, err = run(capsys, cmd, str(bad))
        assert code == 2 and "Traceback" not in err
        assert f"{bad}:3: cluster.nodez: unknown key 'nodez' (did you mean 'nodes'?)" in err
    code, out, err = run(capsys, "validate", str(bad), "--json")
    doc = json.loads(out)
    assert code == 2 and doc[0]["ok"] is False and doc[0]["errors"][0]["line"] == 3
    assert doc[0]["errors"][0]["path"] == "cluster.nodez"


def test_validate_ok(capsys):
    code, out, _ = run(capsys, "validate", *map(str, SCENARIOS))
    assert code == 0 and out.count("ok: ") == len(SCENARIOS)


PROGRAMS = '''
import numpy as np
import simcomm.distributed as dist

def boom(rank):
    dist.init_process_group("nccl")
    if rank == 1:
        raise RuntimeError("rank one failed")
    dist.barrier()

def stuck(rank):
    dist.init_process_group("nccl")
    x = np.zeros(4, dtype=np.float32)
    dist.recv(x, 1 - rank)
'''


@pytest.mark.parametrize("fn", ["boom", "stuck"])
def test_simulation_errors_exit_1(capsys, tmp_path, monkeypatch, fn):
    (tmp_path / "cli_test_programs.py").write_text(PROGRAMS)
    monkeypatch.syspath_prepend(str(tmp_path))
    scen = tmp_path / "p.yaml"
    scen.write_text(f"cluster: {{preset: hgx-h100}}\nworkload: {{kind: program, program: "
                    f"'cli_test_programs:{fn}', ranks: 2}}\n")
    code, out, err = run(capsys, "run", str(scen), "--no-files", "--json")
    assert code == 1 and err.startswith("simcomm: error: ") and json.loads(out)["error"]["exit_code"] == 1
    # a rank that raised shows its own traceback (the program's frames, none of simcomm's); a deadlock shows none
    assert ("rank 1: Traceback" in err and "cli_test_programs.py" in err and "simcomm/" not in err) if fn == "boom" \
        else "Traceback" not in err


# ---- sweep, presets, help, bench ---------------------------------------------------------------------------
def test_sweep(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the scenario's outputs.json lands in simcomm-out/ here
    path = ROOT / "scenarios" / "scaling-sweep.yaml"
    code, out, _ = run(capsys, "sweep", str(path), "--jobs", "1", "--json", "--param", "cluster.nodes=1,2",
                       "--out", str(tmp_path / "s.json"))
    doc = json.loads(out)
    assert code == 0 and len(doc["rows"]) == 4 and doc["parameters"]["cluster.nodes"] == [1, 2]
    assert json.loads((tmp_path / "s.json").read_text()) == doc
    code, out, _ = run(capsys, "sweep", str(path), "--jobs", "1", "--param", "cluster.nodes=1",
                       "--param", "model.protocol=[Simple]")
    assert code == 0 and "busbw (GB/s)" in out and "peak_busbw (GB/s)" in out
    saved = json.loads((tmp_path / "simcomm-out" / "scaling-sweep" / "result.json").read_text())
    assert "wrote json: simcomm-out/scaling-sweep/result.json" in out and len(saved["rows"]) == 1
    code, _, err = run(capsys, "sweep", str(ROOT / "scenarios" / "quickstart.yaml"))
    assert code == 2 and "no sweep section" in err
    code, out, err = run(capsys, "sweep", str(path), "--jobs", "1", "--param", "cluster.nodes=0")
    assert code == 1 and "error" in out and "cluster.nodes" in out


def test_presets(capsys):
    code, out, _ = run(capsys, "presets", "--json")
    names = [p["name"] for p in json.loads(out)]
    assert code == 0 and {"hgx-h100", "dgx-a100", "pcie-4gpu", "cpu-host"} <= set(names)
    code, out, _ = run(capsys, "presets", "hgx-h100", "--nodes", "2", "--json")
    assert code == 0 and json.loads(out)["ranks"] == 16
    code, out, _ = run(capsys, "presets")
    assert code == 0 and "hgx-h100" in out
    code, _, err = run(capsys, "presets", "hgx-h1000")
    assert code == 2 and "did you mean 'hgx-h100'" in err


def test_presets_name_wraps_its_prose_below_the_table(capsys):
    """Issue 25: `presets NAME` put a 440-character description in one table cell."""
    code, out, _ = run(capsys, "presets", "hgx-h100")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 100
    lines = out.splitlines()
    assert any(line.split()[:2] == ["description", "(below)"] for line in lines)
    below = " ".join(x.strip() for x in out.split("\ndescription:\n")[1].split("\n\n")[0].splitlines())
    from simcomm.hardware import describe_preset
    assert below == describe_preset("hgx-h100", 1)["description"]


def test_presets_name_prints_units_and_no_paths_outside_the_repo(capsys):
    """Issue 11: `presets NAME` printed raw floats, and a source cited a path outside the repository."""
    code, out, _ = run(capsys, "presets", "hgx-h100", "--nodes", "2")
    assert code == 0
    table = out.split("\n\n")[0]  # the key/value table; the prose follows it
    lines = {line.split()[0]: line for line in table.splitlines() if line.strip()}
    assert lines["memory_bandwidth"].split()[1:] == ["3", "TB/s"]
    assert lines["memory_capacity"].split()[1:] == ["80", "GiB"]
    assert lines["compute_rate"].split()[1:] == ["790", "TFLOP/s"]
    assert "370.8 GB/s per direction, 700 ns latency" in lines["intra_node"]
    assert "48 GB/s per direction" in lines["inter_node"]
    assert "/work/" not in out and "e+" not in out
    code, out, _ = run(capsys, "presets", "hgx-h100", "--json")
    assert json.loads(out)["units"]["memory_bandwidth"] == "bytes/s"


def test_run_several_scenarios(capsys, tmp_path):
    good = tmp_path / "a.yaml"
    good.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizes: [1MiB]}\n")
    other = tmp_path / "b.yaml"
    other.write_text("cluster: {preset: dgx-a100}\nworkload: {kind: perf, sizes: [2MiB]}\n")
    bad = tmp_path / "c.yaml"
    bad.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizez: [1MiB]}\n")
    code, out, err = run(capsys, "run", str(good), str(other), "--no-files")
    assert code == 0 and err == "" and "scenario a:" in out and "scenario b:" in out
    code, out, err = run(capsys, "run", str(good), str(bad), str(other), "--json", "--out", str(tmp_path / "o"),
                         "--save-json")
    docs = json.loads(out)
    assert code == 2 and [d.get("scenario") for d in docs] == ["a", None, "b"]
    assert docs[1]["scenario_file"] == str(bad) and "sizez" in docs[1]["error"]["message"] and "sizez" in err
    assert (tmp_path / "o" / "a" / "result.json").exists() and (tmp_path / "o" / "b" / "result.json").exists()


def test_python_dash_m_simcomm_from_another_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "simcomm", "run", str(ROOT / "scenarios" / "quickstart.yaml"),
                           "--no-files"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and "scenario quickstart" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "simcomm", "--version"], capture_output=True, text=True,
                          cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("simcomm ")


@pytest.mark.parametrize("cmd", ["run", "perf", "sweep", "presets", "validate", "bench"])
def test_help_everywhere(capsys, cmd):
    code, out, _ = run(capsys, cmd, "--help")
    assert code == 0 and "usage: simcomm" in out


def test_top_level_usage(capsys):
    assert run(capsys, "--help")[0] == 0
    assert run(capsys)[0] == 2
    assert run(capsys, "frobnicate")[0] == 2
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("simcomm ")


def test_cli_reference_mentions_every_command_and_option():
    import argparse

    from simcomm.cli import build_parser
    doc = (ROOT / "docs" / "cli.md").read_text()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        assert f"## simcomm {name}" in doc, name
        for action in parser._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help" and action.help != argparse.SUPPRESS:
                    assert f"`{opt}" in doc, (name, opt)


def test_outputs_rank_traces_in_the_scenario_file(capsys, tmp_path):
    """`outputs.rank_traces` does what `run --rank-traces` does: one trace per rank, named as asked."""
    scen = tmp_path / "s.yaml"
    scen.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizes: [1MiB], ranks: 4}\n"
                    "outputs: {rank_traces: per_rank, report: false}\n")
    code, out, err = run(capsys, "run", str(scen), "--out", str(tmp_path / "o"))
    assert code == 0 and err == "" and out == ""
    files = sorted(p.name for p in (tmp_path / "o" / "per_rank").iterdir())
    assert files == [f"rank{r}.json" for r in range(4)]
    assert json.loads((tmp_path / "o" / "per_rank" / "rank2.json").read_text())["distributedInfo"]["rank"] == 2
    scen.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizes: [1MiB]}\n"
                    "outputs: {rank_traces: ../up}\n")
    code, _, err = run(capsys, "validate", str(scen))
    assert code == 2 and "outputs.rank_traces" in err


def test_a_failing_rank_shows_its_own_traceback_and_debug_shows_everything(capsys, tmp_path):
    (tmp_path / "failing_prog.py").write_text(
        "import simcomm.distributed as dist\n\n"
        "def helper(rank):\n    if rank == 1:\n        raise ValueError('rank 1 blew up')\n\n"
        "def main(rank):\n    dist.init_process_group('nccl')\n    helper(rank)\n")
    scen = tmp_path / "s.yaml"
    scen.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: program, program: 'failing_prog:main', ranks: 2}\n")
    code, _, err = run(capsys, "run", str(scen), "--no-files")
    prog = str(tmp_path / "failing_prog.py")
    assert code == 1 and err.startswith("simcomm: error: rank 1 raised ValueError: rank 1 blew up\n")
    assert f'File "{prog}", line 9, in main' in err and f'File "{prog}", line 5, in helper' in err
    assert "runtime.py" not in err and err.rstrip().endswith("ValueError: rank 1 blew up")
    code, out, err = run(capsys, "run", str(scen), "--no-files", "--json")
    doc = json.loads(out)["error"]
    assert code == 1 and f'"{prog}", line 5, in helper' in doc["traceback"]
    for argv in (["run", str(scen), "--no-files", "--debug"], ["--debug", "run", str(scen), "--no-files"]):
        code, _, err = run(capsys, *argv)
        assert code == 1 and "runtime.py" in err and "cli/__init__.py" in err and f"line 5, in helper" in err
    code, _, err = run(capsys, "run", str(tmp_path / "missing.yaml"), "--debug")
    assert code == 2 and "Traceback (most recent call last)" in err and "ScenarioError" in err


def test_sweep_honours_the_scenarios_outputs(capsys, tmp_path):
    """outputs.json (with outputs.dir) is written by a sweep as by run; report: false prints no table; outputs a
    sweep cannot write are named, not silently dropped."""
    scen = tmp_path / "s.yaml"
    scen.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizes: [1MiB]}\n"
                    f"outputs: {{dir: {tmp_path / 'o'}, json: rows.json, report: false, trace: true}}\n"
                    "sweep: {parameters: {workload.sizes: [[1MiB], [2MiB]]}, jobs: 1}\n")
    code, out, err = run(capsys, "sweep", str(scen))
    doc = json.loads((tmp_path / "o" / "rows.json").read_text())
    assert code == 0 and out == "" and [r["size"] for r in doc["rows"]] == [1 << 20, 2 << 20]
    assert "note: a sweep writes no outputs.trace" in err and not (tmp_path / "o" / "trace.json").exists()


def test_rank_traces_say_how_hta_should_load_them(capsys, tmp_path):
    """Issue 25: HTA rounds each kernel's start up and end down to whole us unless HTA_DISABLE_NS_ROUNDING=1, so
    sub-us kernels come out negative (train-gpt-3d: compute_time -13.0 us); the run says how to load the files."""
    scen = tmp_path / "s.yaml"
    scen.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: perf, sizes: [1MiB], ranks: 4}\n")
    code, out, _ = run(capsys, "run", str(scen), "--out", str(tmp_path / "o"), "--rank-traces")
    assert code == 0 and "wrote rank_traces: " in out and "HTA_DISABLE_NS_ROUNDING=1" in out
    # 4 of the box's 8 GPUs ran the collective: the line says only they have a file
    assert "(4 of the cluster's 8 ranks ran something in the simulation; only they have a file)" in out


def test_no_interference_runs_the_scenario_without_sharing_the_gpus(capsys):
    """simcomm run --no-interference: the step without the breakdown's interference line, and faster."""
    docs = []
    for flags in ((), ("--no-interference",)):
        code, out, _ = run(capsys, "run", str(ROOT / "scenarios" / "gpt3-13b-pipeline-demo.yaml"), "--json",
                           "--no-files", *flags)
        assert code == 0
        docs.append(json.loads(out)["step"])
    on, off = docs
    assert on["breakdown"]["interference"] > 0 and "interference" not in off["breakdown"]
    assert off["step_time"] < on["step_time"]
