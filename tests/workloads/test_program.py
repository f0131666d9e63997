"""The program workload: its report (per-rank loss and what each rank sent, from the recorded operations), the
module found next to the scenario file, args with units arriving as numbers."""
from pathlib import Path

import pytest

from simcomm.report.table import render
from simcomm.scenario import ScenarioError, load_scenario, load_text
from simcomm.workloads import registry, run_scenario
from simcomm.workloads.program import with_units

ROOT = Path(__file__).parents[2] / "scenarios"


def test_examples_run_as_scenarios_and_report_loss_and_traffic():
    pp = run_scenario(load_scenario(ROOT / "train-pp.yaml"))
    ranks = pp.details["ranks"]
    # stage 0 sends 4 microbatches x 5 steps of activations; middle stages also send gradients back
    assert [r["p2p_messages"] for r in ranks] == [20, 40, 40, 20]
    assert [r["p2p"] for r in ranks] == [20 * 4 * 32 * 8, 40 * 4 * 32 * 8, 40 * 4 * 32 * 8, 20 * 4 * 32 * 8]
    assert ranks[-1]["loss_last"] < ranks[-1]["loss_first"] and ranks[0]["loss_last"] is None
    text = render(registry.workload("program").report(pp), rich=False)
    assert "sent point-to-point" in text and "loss (first -> last)" in text and "(5 steps)" in text
    dp = run_scenario(load_scenario(ROOT / "train-dp.yaml"))
    assert all(r["collective"] > 0 and r["p2p"] == 0 for r in dp.details["ranks"])


def test_the_gpt_scenario_splits_what_each_rank_sent_by_axis():
    res = run_scenario(load_scenario(ROOT / "train-gpt-3d.yaml"))
    steps, dp = 3, 4
    for r, row in zip(res.details["ranks"], res.rows):
        split = r["by_axis"]
        assert list(split) == ["tp", "dp", "pp", "embedding"]  # tp 2 with SP, ZeRO-1 over dp 4, 2 stages, tied
        assert sum(split.values()) == r["collective"] + r["p2p"] and split["pp"] == r["p2p"] > 0
        # stage 0 sends each microbatch's activations (8 positions of 16 under SP x 1 sequence x 32 float64);
        # the last stage sends their gradients back: 2 microbatches per dp rank, 3 steps
        assert split["pp"] == steps * 2 * 8 * 32 * 8
        # ZeRO-1: a reduce-scatter and an all-gather of the whole flat buffer per step, (dp - 1) / dp of it each
        assert split["dp"] == steps * 2 * (dp - 1) / dp * row["result"]["state_bytes"]["params"]
        assert split["tp"] > split["embedding"] > 0
    text = render(registry.workload("program").report(res), rich=False)
    assert "sent by axis" in text and "tp 276.75 KiB, dp 507.375 KiB, pp 12 KiB, embedding 6 KiB" in text
    dp_only = run_scenario(load_scenario(ROOT / "train-dp.yaml"))  # the lecture's program tags no axis
    assert all("by_axis" not in r for r in dp_only.details["ranks"])


def test_without_flows_the_report_says_why_bytes_are_missing():
    text = ("cluster: {preset: cpu-host}\nworkload: {kind: program, program: "
            "'simcomm.workloads.programs:allreduce_check', args: [1024, 2]}\n")
    res = run_scenario(load_text(text), detail="steps")
    blocks = registry.workload("program").report(res)
    assert "sent by collectives" not in render(blocks, rich=False)
    assert any(isinstance(b, str) and "model.detail 'flows'" in b for b in blocks)
    assert res.details["ranks"][0] == {"rank": 0, "loss_first": None, "loss_last": None, "steps": 0}

PROGRAM = """\
import simcomm.distributed as dist
import numpy as np

def main(rank, nbytes, pause, label):
    import helper  # a neighbour module, imported while the ranks run
    dist.init_process_group("nccl")
    x = np.ones(nbytes // 4, dtype=np.float32)
    dist.all_reduce(x)
    return {"nbytes": nbytes, "pause": pause, "label": label, "tag": helper.TAG, "sum": float(x[0]),
            "file": __file__}
"""


def scenario_dir(path, tag: str):
    path.mkdir()
    (path / "myprog_rel.py").write_text(PROGRAM)
    (path / "helper.py").write_text(f"TAG = {tag!r}\n")
    (path / "s.yaml").write_text("cluster: {preset: hgx-h100}\nworkload: {kind: program, program: 'myprog_rel:main', "
                                 "ranks: 2, args: [64MiB, 2ms, ring]}\n")
    return path / "s.yaml"


def test_program_module_is_imported_from_the_scenario_files_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not where the scenario is
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = run_scenario(load_scenario(scenario_dir(tmp_path / "a", "a")))
    assert [r["result"] for r in result.rows] == [
        {"nbytes": 64 << 20, "pause": pytest.approx(2e-3), "label": "ring", "tag": "a", "sum": 2.0,
         "file": str(tmp_path / "a" / "myprog_rel.py")}] * 2


def test_a_module_of_the_same_name_in_another_scenarios_directory_is_that_ones(tmp_path, monkeypatch):
    import sys
    monkeypatch.setattr(sys, "modules", dict(sys.modules))  # what this test imports goes away with it
    first = run_scenario(load_scenario(scenario_dir(tmp_path / "a", "a")))
    second = run_scenario(load_scenario(scenario_dir(tmp_path / "b", "b")))
    assert first.rows[0]["result"]["file"] == str(tmp_path / "a" / "myprog_rel.py")
    assert second.rows[0]["result"]["file"] == str(tmp_path / "b" / "myprog_rel.py")


def test_a_missing_module_says_where_it_looked(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("cluster: {preset: hgx-h100}\nworkload: {kind: program, program: 'nowhere_mod:main'}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert e.value.path == "workload.program" and str(tmp_path) in str(e.value) and "working directory" in str(e.value)


def test_units_in_args():
    assert with_units(["64MiB", "2 ms", "50GB/s", "400Gbps", "8G", "ring", "64", 3, ["1KiB"], {"t": "1us"},
                       "x1MiB", "1m"]) == \
        [64 << 20, pytest.approx(2e-3), 50e9, 50e9, 8 << 30, "ring", "64", 3, [1024], {"t": pytest.approx(1e-6)},
         "x1MiB", "1m"]


def test_the_header_counts_the_ranks_the_program_ran_on():
    """Issue 25: train-pp's header said 8 ranks (the box's) where its table lists the 4 the program ran on."""
    from simcomm.workloads import report_blocks
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "train-pp.yaml"
    result = run_scenario(load_scenario(scenario))
    head = report_blocks(result)[0]
    assert len(result.rows) == 4 and "program on hgx-h100 (4 of its 8 ranks of H100-SXM5-80GB;" in head
