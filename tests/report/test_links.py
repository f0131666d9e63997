"""Link usage from the rates the solver assigned: never above capacity, ranked by utilisation (issue 11: a links
plot at 140% from bytes over flow lifetimes, and a 99.6% spine link ranked 64th by bytes)."""
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from simcomm.hardware import build_cluster
from simcomm.report import write_outputs
from simcomm.report.links import binned, link_usage
from simcomm.scenario import load_scenario, load_text
from simcomm.session import Session
from simcomm.workloads import run_perf, run_scenario

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml"
FAT_TREE = """\
name: ft4
cluster: {preset: hgx-h100, nodes: 4, fabric: fat-tree, fabric_options: {leaf_ports: 16}}
workload: {kind: perf, collectives: [all_reduce], sizes: [1GiB]}
"""


def test_links_are_ranked_by_utilisation():
    c = build_cluster("hgx-h100", nodes=2)
    session = Session(c, detail="flows")
    run_perf(session, ["all_reduce"], [1 << 26], algorithms=["ring"])
    usage = link_usage(session.sim.recorder.link_loads, c)
    util = [u.nbytes / u.capacity for u in usage]
    assert util == sorted(util, reverse=True) and len(usage) > 10
    by_bytes = sorted(usage, key=lambda u: -u.nbytes)
    assert by_bytes[0].capacity > usage[0].capacity  # the fast NVLink links carry the most bytes, NICs are busiest


def outputs(result, tmp_path):
    write_outputs(result, tmp_path, trace_file="trace.json", plots=["links"])
    trace = json.loads((tmp_path / "trace.json").read_text())
    counters: dict[str, list] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).append(e["args"]["GB/s"] * 1e9)
    png = Image.open(tmp_path / "links.png").info["Description"]
    return counters, png.split(": ", 1)[1].split("; ")


@pytest.mark.parametrize("scenario", ["quickstart", "fat-tree"])
def test_no_link_is_ever_above_capacity(scenario, tmp_path):
    result = run_scenario(load_scenario(QUICKSTART) if scenario == "quickstart" else load_text(FAT_TREE, "ft4.yaml"))
    c = result.cluster
    usage = link_usage(result.simulation.recorder.link_loads, c)
    assert usage and max(u.peak for u in usage) <= 1 + 1e-9
    assert max(u.peak for u in usage) > 0.99  # something ran flat out: the loads are rates, not averages
    for u in usage:
        _, rates = binned(u, 0.0, result.elapsed)
        assert (rates <= u.capacity * (1 + 1e-9)).all()
    names = {c.link_name(j): cap for j, cap in enumerate(c.link_capacity)}
    counters, _ = outputs(result, tmp_path)
    for name, values in counters.items():
        assert max(values) <= names[name.split(" ", 1)[1]] * (1 + 1e-6)


def test_the_fat_tree_bottleneck_comes_first_in_the_plot_and_the_trace(tmp_path):
    result = run_scenario(load_text(FAT_TREE, "ft4.yaml"))
    usage = link_usage(result.simulation.recorder.link_loads, result.cluster)
    top = usage[0]
    assert "spine" in top.name and top.utilisation(result.elapsed) > 0.99
    by_bytes = [u.name for u in sorted(usage, key=lambda u: -u.nbytes)]
    assert by_bytes.index(top.name) > 8  # NVLink links carry more bytes: ranked by bytes, the spine falls behind
    counters, shown = outputs(result, tmp_path)
    assert min(counters) == f"#01 {top.name}"  # viewers sort counter tracks by name
    assert shown[0].startswith(top.name + " 99.") and len(shown) == 8
    assert np.isclose(max(counters[min(counters)]), top.capacity, rtol=1e-6)
