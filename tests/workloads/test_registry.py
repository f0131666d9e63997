"""Workload kinds come from one registry: the scenario schema, the report and the sweep are built from it."""
from simcomm.scenario import load_text
from simcomm.scenario.schema import Scenario
from simcomm.workloads import WORKLOADS, report_blocks, run_scenario, summarize

TEXT = """\
cluster: {preset: hgx-h100}
workload: {kind: perf, collectives: [all_reduce, all_gather], sizes: [64KiB, 16MiB], algorithms: [auto, ring]}
"""


def test_report_blocks_cover_every_table():
    blocks = report_blocks(run_scenario(load_text(TEXT, "t.yaml")))
    tables = [b for b in blocks if not isinstance(b, str)]
    results = [t for t in tables if not t[0].startswith("why the tuner")]
    assert len(results) == 4 and results[0][1][7] == "busbw (GB/s)"
    assert len(tables) == 6  # each auto series is followed by the tuner's predictions
    assert blocks[0].startswith("scenario t: perf on hgx-h100 (8 ranks")
    assert blocks[-1].startswith("simulated ")


def test_schema_accepts_exactly_the_registered_kinds():
    kinds = {spec.model_fields["kind"].annotation.__args__[0] for spec in (w.Spec for w in WORKLOADS.values())}
    assert kinds == set(WORKLOADS) == {"perf", "program", "contention"} | (set(WORKLOADS) - {"perf", "program",
                                                                                          "contention"})
    assert "workload" in Scenario.model_fields


def test_summary_comes_from_the_kind():
    (row,) = [r for r in summarize(run_scenario(load_text(TEXT, "t.yaml"))) if r["algorithm"] == "ring"][:1]
    assert row["collective"] == "all_reduce" and row["peak_busbw"] >= row["busbw"] > 0


def test_sweep_rows_name_what_the_tuner_chose():
    """Issue 25: `simcomm sweep`'s algorithm column said `auto`; it names the algorithm and protocol that ran at the
    series' largest size, next to what the series requested."""
    rows = summarize(run_scenario(load_text(TEXT, "t.yaml")))
    auto = [r for r in rows if r["requested"] == "auto"]
    assert auto and all(r["algorithm"] not in ("auto", "") and r["protocol"] in ("LL", "LL128", "Simple")
                        for r in auto)
    assert all(r["algorithm"] == r["requested"] for r in rows if r["requested"] != "auto")
