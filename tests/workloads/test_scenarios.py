"""run_scenario for each workload kind, and parameter sweeps (local pool and a stand-in Ray)."""
import sys

import pytest

from simcomm.errors import SimcommError
from simcomm.scenario import load_text
from simcomm.workloads import run_scenario, summarize
from simcomm.scenario.sweep import grid_points, run_point, run_sweep

PERF = """\
cluster: {preset: hgx-h100}
workload: {kind: perf, sizes: [1MiB, 64MiB]}
"""


def test_program_workload_runs_with_numerics():
    text = ("cluster: {preset: cpu-host}\nworkload: {kind: program, program: "
            "'simcomm.workloads.programs:allreduce_check', args: [1024, 2]}\n")
    res = run_scenario(load_text(text))
    assert [r["result"] for r in res.rows] == [2.5] * 4
    assert res.elapsed > 0 and all(r["collective_time"] > 0 for r in res.rows)
    assert summarize(res)[0]["ranks"] == 4


def test_perf_workload_rows_and_summary():
    res = run_scenario(load_text(PERF))
    assert [r.size for r in res.rows] == [1 << 20, 1 << 26] and res.elapsed == pytest.approx(
        sum(r.time for r in res.rows))
    (s,) = summarize(res)
    assert s["collective"] == "all_reduce" and s["peak_busbw"] >= s["busbw"] > 0


def test_contention_workload():
    text = ("cluster: {preset: pcie-4gpu, nodes: 2}\nworkload:\n  kind: contention\n  groups:\n"
            "    - {ranks: [0, 4], size: 64MiB}\n    - {name: b, ranks: [1, 5], size: 64MiB}\n")
    res = run_scenario(load_text(text))
    assert [g.name for g in res.rows] == ["group0", "b"]
    assert all(g.slowdown == pytest.approx(2.0, rel=0.05) for g in res.rows)


def test_grid_points_order():
    assert grid_points({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]


def test_sweep_local_pool_matches_serial():
    loaded = load_text(PERF, "p.yaml")
    params = {"cluster.nodes": [1, 2], "model.protocol": ["LL128", "Simple"]}
    serial = run_sweep(loaded, params, jobs=1)
    pooled = run_sweep(loaded, params, jobs=2)
    assert serial == pooled and len(serial) == 4
    assert serial[0]["cluster.nodes"] == 1 and serial[0]["model.protocol"] == "LL128"
    assert serial[1]["busbw"] > serial[0]["busbw"]


def test_sweep_point_errors_name_the_key():
    loaded = load_text(PERF, "p.yaml")
    (row,) = run_point((loaded.source.name, loaded.source.data, loaded.source.lines, {"cluster.nodes": 0}))
    assert "cluster.nodes" in row["error"] and "p.yaml [cluster.nodes=0]" in row["error"]
    (row,) = run_point((loaded.source.name, loaded.source.data, loaded.source.lines, {"cluster.preset.x": 1}))
    assert "cannot set" in row["error"]


def test_sweep_on_ray_uses_remote_tasks(fake_ray):
    done = []
    rows = run_sweep(load_text(PERF), {"cluster.nodes": [1, 2]}, ray=True, ray_address="auto",
                     progress=lambda d, t: done.append((d, t)))
    local = run_sweep(load_text(PERF), {"cluster.nodes": [1, 2]}, jobs=1)
    assert rows == local and done == [(1, 2), (2, 2)] and fake_ray.inits[0]["address"] == "auto"
    assert fake_ray.tasks == 2


def test_sweep_on_ray_without_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SimcommError, match="pip install 'simcomm\\[ray\\]'"):
        run_sweep(load_text(PERF), {"cluster.nodes": [1]}, ray=True)
