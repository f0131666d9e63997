"""The program workload's report: per-rank loss and what each rank sent, from the recorded operations."""
from pathlib import Path

from simcomm.report.table import render
from simcomm.scenario import load_scenario, load_text
from simcomm.workloads import registry, run_scenario

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


def test_without_flows_the_report_says_why_bytes_are_missing():
    text = ("cluster: {preset: cpu-host}\nworkload: {kind: program, program: "
            "'simcomm.workloads.programs:allreduce_check', args: [1024, 2]}\n")
    res = run_scenario(load_text(text), detail="steps")
    blocks = registry.workload("program").report(res)
    assert "sent by collectives" not in render(blocks, rich=False)
    assert any(isinstance(b, str) and "model.detail 'flows'" in b for b in blocks)
    assert res.details["ranks"][0] == {"rank": 0, "loss_first": None, "loss_last": None, "steps": 0}
