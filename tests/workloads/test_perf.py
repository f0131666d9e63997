"""The perf sweep: nccl-tests' sizes, counts and busbw factors."""
import pytest

from simcomm.algorithms import ALGORITHMS
from simcomm.collective import sizes_between
from simcomm.hardware import build_cluster
from simcomm.session import Session
from simcomm.workloads.perf import expand_algorithms, run_perf

FACTOR = {"all_reduce": 2 * 7 / 8, "all_gather": 7 / 8, "reduce_scatter": 7 / 8, "all_to_all": 7 / 8,
          "broadcast": 1.0, "reduce": 1.0, "sendrecv": 1.0}


@pytest.fixture(scope="module")
def rows():
    sim = Session(build_cluster("hgx-h100"), detail="steps")
    return run_perf(sim, list(FACTOR), [8, 1 << 12, 1 << 22, 1 << 28], dtype="float32")


def test_busbw_factors_and_algbw(rows):
    for r in rows:
        assert r.algbw == pytest.approx(r.size / r.time if r.time else 0.0)
        assert r.busbw == pytest.approx(r.algbw * FACTOR[r.collective]), r.collective


def test_sizes_and_counts(rows):
    by = {}
    for r in rows:
        by.setdefault(r.collective, []).append(r)
    assert [r.size for r in by["all_reduce"]] == [8, 1 << 12, 1 << 22, 1 << 28]
    assert [r.count for r in by["all_reduce"]] == [2, 1 << 10, 1 << 20, 1 << 26]
    # all_gather's S is the whole buffer: 8 B over 8 ranks of 4-byte floats rounds down to 0, as in nccl-tests.
    assert by["all_gather"][0].size == 0 and by["all_gather"][0].time == 0 and by["all_gather"][0].busbw == 0
    assert all(r.time > 0 for r in rows if r.size > 0)
    assert [r.root_column for r in by["broadcast"]] == [0] * 4 and by["broadcast"][0].redop == "none"
    assert by["all_reduce"][0].root_column == -1 and by["sendrecv"][0].redop == "sum"


def test_large_all_reduce_is_near_the_nvlink_rate(rows):
    big = [r for r in rows if r.collective == "all_reduce"][-1]
    assert big.time > [r for r in rows if r.collective == "all_reduce"][-2].time
    assert 300e9 < big.busbw < 700e9


def test_forced_algorithm_and_protocol():
    sim = Session(build_cluster("hgx-h100"), detail="steps")
    rows = run_perf(sim, ["all_reduce"], [1 << 20], algorithms=["ring"], protocol="LL128")
    assert rows[0].algorithm == "ring" and rows[0].protocol == "LL128" and rows[0].requested == "ring"


def test_expand_algorithms():
    assert expand_algorithms(None, "all_reduce") == [None]
    assert expand_algorithms(["auto", "all"], "all_reduce") == [None] + sorted(ALGORITHMS["all_reduce"])
    assert expand_algorithms(["ring", "nosuch"], "all_to_all") == []
    explicit = set()
    expand_algorithms(["all", "ring"], "all_reduce", explicit)
    assert explicit == {"ring"}


def test_all_skips_what_cannot_run_here():
    notes = []
    sim = Session(build_cluster("pcie-4gpu"), detail="steps")
    rows = run_perf(sim, ["all_reduce"], [1 << 20], algorithms=["all"], notes=notes)
    assert "nvls" not in {r.algorithm for r in rows} and len(rows) >= 1
    if "nvls" in ALGORITHMS["all_reduce"]:
        assert any("skipped nvls" in n for n in notes)


def test_sizes_between_matches_nccl_tests():
    assert len(sizes_between(8, 8 << 30, 2)) == 31


def test_report_and_json_explain_the_tuners_choice():
    from simcomm.scenario import load_text
    from simcomm.report import result_json
    from simcomm.workloads import report_blocks, run_scenario
    text = ("cluster: {preset: hgx-h100, nodes: 2}\nworkload: {kind: perf, collectives: [all_reduce], "
            "sizes: [4KiB, 1GiB], algorithms: [auto, ring]}\n")
    result = run_scenario(load_text(text, "t.yaml"))
    why = [b for b in report_blocks(result) if not isinstance(b, str) and b[0].startswith("why the tuner")]
    assert len(why) == 1  # the auto series only; a forced algorithm needs no explanation
    title, headers, table = why[0]
    auto = [r for r in result.rows if r.requested == "auto"]
    assert [row[0] for row in table] == ["4 KiB", "1 GiB"]
    for row, r in zip(table, auto):
        chosen = f"{r.algorithm}/{r.protocol}"
        assert row[-2] == chosen
        times = dict(zip(headers[1:-2], row[1:-2]))
        assert times[f"{chosen} (us)"] == pytest.approx(r.predicted * 1e6)
        assert min(t for t in times.values() if t is not None) == times[f"{chosen} (us)"]
        runner, slower = row[-1].split(" +")
        assert times[f"{runner} (us)"] == pytest.approx(r.predicted * 1e6 * (1 + float(slower[:-1]) / 100), rel=1e-3)
    assert {"tree/LL128 (us)", "ring/Simple (us)"} <= set(headers)
    doc = result_json(result)
    assert [(t["size"], t["algorithm"]) for t in doc["tuner"]] == [(r.size, r.algorithm) for r in auto]
    assert doc["tuner"][1]["weighed"][0]["predicted"] == auto[1].predicted
    assert all("weighed" not in row for row in doc["rows"])  # rows keep nccl-tests' figures only
