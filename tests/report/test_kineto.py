"""Per-rank traces that Holistic Trace Analysis loads: its temporal breakdown, kernel breakdown and
communication/computation overlap must equal the simulation's own totals (issue 11)."""
import json
import textwrap

import pytest
from hta.trace_analysis import TraceAnalysis

from simcomm.cli import main
from simcomm.engine.trace import length, union
from simcomm.engine.trace import overlap as intersect
from simcomm.scenario import load_scenario
from simcomm.workloads import run_scenario

# A rank program that overlaps an async all_reduce with compute, then runs compute and a blocking all_reduce.
PROGRAM = '''
import numpy as np
import simcomm.distributed as dist
from simcomm.distributed import clock

def overlap(rank, flops):
    dist.init_process_group("nccl")
    t = np.ones(1 << 22, dtype=np.float32)
    work = dist.all_reduce(t, async_op=True)
    clock.compute(flops=flops * (1 + rank))
    work.wait()
    clock.compute(flops=flops / 2)
    dist.all_reduce(t)
    if rank < 2:
        dist.send(t[:1024], dst=1 - rank) if rank == 0 else dist.recv(t[:1024], src=0)
    return float(t[0])
'''


def simulated_totals(result):
    """Per rank, in us, from the simulation's timeline: communication and compute time (merged), their overlap,
    and the span from the first kernel's start to the last one's end."""
    per_rank = {}
    for a in result.timeline:
        us = (a.start * 1e6, a.end * 1e6)
        if a.kind == "collective":
            per_rank.setdefault(a.rank, ([], []))[0].append(us)
        elif a.kind == "p2p":  # a point-to-point transfer: a SendRecv kernel on both ends
            for r in (a.rank, a.peer):
                per_rank.setdefault(r, ([], []))[0].append(us)
        elif a.kind == "compute":
            per_rank.setdefault(a.rank, ([], []))[1].append(us)
    out = {}
    for rank, (comm, comp) in per_rank.items():
        comm, comp = union(comm), union(comp)
        both = union(comm + comp)
        out[rank] = {"comm": length(comm), "compute": length(comp), "overlap": intersect(comm, comp),
                     "span": both[-1][1] - both[0][0], "busy": length(both), "pieces": 2 * (len(comm) + len(comp))}
    return out


@pytest.fixture
def program_scenario(tmp_path, monkeypatch):
    (tmp_path / "overlap_prog.py").write_text(PROGRAM)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "overlap.yaml"
    path.write_text(textwrap.dedent("""\
        cluster: {preset: hgx-h100}
        workload: {kind: program, program: "overlap_prog:overlap", ranks: 4, args: [20000000000.0]}
        model: {detail: flows}
        """))
    return path


def hta(tmp_path, scenario, monkeypatch):
    """Run the scenario through the CLI with --rank-traces and load the directory into HTA."""
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")  # keep the traces' nanoseconds (HTA rounds to us)
    out = tmp_path / "out"
    assert main(["run", str(scenario), "--rank-traces", "--out", str(out), "--json"]) == 0
    return TraceAnalysis(trace_dir=str(out / "rank_traces"))


@pytest.mark.parametrize("which", ["quickstart", "program"])
def test_hta_breakdowns_match_the_simulation(tmp_path, monkeypatch, capsys, program_scenario, which):
    from pathlib import Path
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml" if which == "quickstart" \
        else program_scenario
    analysis = hta(tmp_path, scenario, monkeypatch)
    doc = json.loads(capsys.readouterr().out)
    result = run_scenario(load_scenario(scenario))
    sim = simulated_totals(result)
    assert sorted(analysis.t.get_ranks()) == sorted(sim) == list(range(8 if which == "quickstart" else 4))

    temporal = analysis.get_temporal_breakdown(visualize=False).set_index("rank")
    overlap = analysis.get_comm_comp_overlap(visualize=False).set_index("rank")
    kinds, _ = analysis.get_gpu_kernel_breakdown(visualize=False)
    kinds = dict(zip(kinds["kernel_type"], kinds["sum"]))
    for rank, s in sim.items():
        row = temporal.loc[rank]
        assert row["kernel_time(us)"] == pytest.approx(s["span"], abs=0.01)  # traces hold whole ns
        assert row["compute_time(us)"] == pytest.approx(s["compute"], abs=0.01)  # traces hold whole ns
        assert row["idle_time(us)"] == pytest.approx(s["span"] - s["busy"], abs=0.01)  # traces hold whole ns
        assert overlap.loc[rank, "comp_comm_overlap_pctg"] == pytest.approx(100 * s["overlap"] / s["comm"],
                                                                           abs=0.01)
    n = sum(s["pieces"] for s in sim.values())  # HTA sums over ranks, cutting each piece to whole us
    assert kinds["COMMUNICATION"] == pytest.approx(sum(s["comm"] - s["overlap"] for s in sim.values()), abs=n)
    if which == "quickstart":
        # perf runs every size back to back: each rank's kernels span the simulated time, with no idle gap
        assert {"COMMUNICATION"} == set(kinds)
        assert all(s["span"] == pytest.approx(result.elapsed * 1e6, rel=1e-9) for s in sim.values())
        assert all(s["comm"] == pytest.approx(sum(r.time for r in result.rows) * 1e6, rel=1e-9)
                   for s in sim.values())
    else:
        assert kinds["COMPUTATION overlapping COMMUNICATION"] == pytest.approx(
            sum(s["overlap"] for s in sim.values()), abs=n)
        assert kinds["COMPUTATION"] == pytest.approx(sum(s["compute"] - s["overlap"] for s in sim.values()), abs=n)
        assert all(0 < overlap.loc[r, "comp_comm_overlap_pctg"] < 100 for r in sim)
        # the report's own per-rank communication time (collectives only) is within HTA's communication time
        for row in doc["rows"]:
            assert row["collective_time"] * 1e6 <= sim[row["rank"]]["comm"] + 1e-6


def test_rank_files_carry_what_hta_needs(tmp_path, monkeypatch, capsys, program_scenario):
    hta(tmp_path, program_scenario, monkeypatch)
    trace = json.loads((tmp_path / "out" / "rank_traces" / "rank1.json").read_text())
    assert (tmp_path / "out" / "rank_traces" / "rank1.json").read_text().startswith(
        '{"distributedInfo": {"backend": "nccl","rank": 1,"world_size": 4')
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"]: e for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime"}
    assert kernels and all(k["args"]["stream"] == k["tid"] and k["args"]["correlation"] in launches for k in kernels)
    assert {k["args"]["stream"] for k in kernels if k["name"].startswith("nccl")} >= {20}
    assert {k["args"]["stream"] for k in kernels if k["name"] == "compute"} == {7}
    assert any(k["name"] == "ncclDevKernel_SendRecv" for k in kernels)
    starts = {e["id"] for e in trace["traceEvents"] if e["ph"] == "s"}
    assert starts and starts == {e["id"] for e in trace["traceEvents"] if e["ph"] == "f"}


def test_the_warnings_filtered_are_htas_own(tmp_path, monkeypatch, capsys, program_scenario, pytestconfig):
    """Issue 25: the test extra's HTA printed ~140 pandas deprecation warnings a run. pyproject.toml filters the
    deprecation warnings raised from HTA's own code; every warning loading and analysing simcomm's traces gives is
    one of those (none is about simcomm's files)."""
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analysis = hta(tmp_path, program_scenario, monkeypatch)
        analysis.get_temporal_breakdown(visualize=False)
        analysis.get_gpu_kernel_breakdown(visualize=False)
    assert caught and all("/hta/" in w.filename and issubclass(w.category, (DeprecationWarning, FutureWarning))
                          for w in caught)
    assert {"ignore::DeprecationWarning:hta", "ignore::FutureWarning:hta"} <= set(pytestconfig.getini("filterwarnings"))
