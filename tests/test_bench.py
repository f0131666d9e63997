"""`simcomm bench` runs and reports counts; its timings are reported, never asserted."""
import json

from simcomm import bench


def test_bench_cases_report_events_and_simulated_time(capsys):
    assert bench.main(["ring-8", "flows-fattree", "--json"]) == 0
    rows = {r["case"]: r for r in json.loads(capsys.readouterr().out)}
    ring = rows["ring-8"]
    assert ring["steps"] == 14 and ring["flows"] == 14 * 8 and ring["events"] > 0
    assert ring["sim_seconds"] > 0
    fat = rows["flows-fattree"]
    assert fat["ranks"] == 1024 and fat["flows"] <= 1024 and fat["solves"] >= 1


def test_bench_rejects_unknown_case(capsys):
    assert bench.main(["nope"]) == 2
    assert "unknown case" in capsys.readouterr().err
