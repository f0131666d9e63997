"""simcomm perf's output and -J file, read by a reader written from nccl-tests' own formats (nccl_tests_reader.py,
not simcomm's code), and the same reader on the measured logs in calibration/ (issue 25)."""
import json
from pathlib import Path

import pytest

from simcomm.cli import main

from .nccl_tests_reader import check_rounding, read_json, read_text

CALIBRATION = Path(__file__).resolve().parents[2] / "calibration" / "nccl-tests"


def perf(capsys, *argv) -> str:
    capsys.readouterr()
    assert main(["perf", *argv]) == 0
    return capsys.readouterr().out


def fit(value: float, width: int) -> str:
    """The value with as many of 2, 1, 0 decimals as fit the column (nccl-tests >= 2.17.3)."""
    return next((t for t in (f"{value:.2f}", f"{value:.1f}") if len(t) <= width), f"{value:.0f}")


def test_perf_output_reads_as_nccl_tests_2_19(capsys, tmp_path):
    out = tmp_path / "r.json"
    text = perf(capsys, "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8", "--np", "2", "-J", str(out))
    [log] = read_text(text)
    assert log.version == (2, 19, 6) and log.nccl[0] == log.nccl[1] > 0 and log.test == "all_reduce_perf"
    assert log.params == {"nthreads": 1, "ngpus": 8, "minbytes": 8, "maxbytes": 8 << 30, "step": 2.0,
                          "step_kind": "factor", "warmup": 5, "iters": 20, "agg_iters": 1, "validation": 1,
                          "graph": 0}
    # -g 8 with 2 processes: 8 ranks per Pid, two Pids, none of them 0
    pids = [d["pid"] for d in log.devices]
    assert len(log.devices) == 16 and len(set(pids)) == 2 and pids == sorted(pids) and 0 not in pids
    assert all(pids[r] == pids[r // 8 * 8] for r in range(16))
    assert [r["size"] for r in log.rows] == [8 << k for k in range(31)]
    assert all(r["out_of_place"]["wrong"] == 0 == r["in_place"]["wrong"] for r in log.rows)
    # the rounding since 2.17.3 shows: 2 decimals wherever they fit (the reader checked every figure)
    times = text.split()
    assert any(t.count(".") and len(t.split(".")[1]) == 1 and len(t) == 7 for t in times)  # e.g. 15943.8
    assert log.footer["out_of_bounds"] == (0, "OK") and log.footer["concluded"] == "all_reduce_perf"
    assert log.footer["avg_busbw"] == pytest.approx(sum(r["out_of_place"]["busbw"] for r in log.rows) / 31,
                                                    rel=1e-3)

    doc = read_json(json.loads(out.read_text()))
    assert doc["version"] == "2.19.6" and doc["args"][0] == "all_reduce_perf" and "-J" in doc["args"]
    assert doc["config"] == {"nthreads": 1, "ngpus": 8, "minimum_bytes": 8, "maximum_bytes": 8 << 30,
                             "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1,
                             "graph": 0}
    assert [d["pid"] for d in doc["devices"]] == pids
    assert doc["out_of_bounds"] == (0, True)
    for row, res in zip(log.rows, doc["results"]):  # the text is the JSON rounded as nccl-tests rounds
        assert (res["size"], res["count"], res["type"], res["redop"], res["root"]) == \
            (row["size"], row["count"], row["type"], row["redop"], row["root"])
        for block in ("out_of_place", "in_place"):
            for key, width in (("time", 7), ("algbw", 6), ("busbw", 6)):
                assert float(fit(res[block][key], width)) == row[block][key]
            assert res[block]["wrong"] == 0
    assert doc["avg_busbw"] == pytest.approx(log.footer["avg_busbw"], rel=1e-5)


def test_no_validation_is_na_and_options_are_stated(capsys, tmp_path):
    out = tmp_path / "r.json"
    text = perf(capsys, "all_gather_perf", "-b", "1M", "-e", "4M", "-f", "2", "-g", "8", "-c", "0", "-w", "2",
                "-n", "50", "-m", "4", "-J", str(out))
    [log] = read_text(text)
    assert (log.params["validation"], log.params["warmup"], log.params["iters"], log.params["agg_iters"]) == \
        (0, 2, 50, 4)
    assert all(r["out_of_place"]["wrong"] is None for r in log.rows)
    doc = read_json(json.loads(out.read_text()))
    assert doc["config"]["validation"] == 0 and doc["config"]["iterations"] == 50
    assert all(r["in_place"]["wrong"] is None for r in doc["results"])


def test_quiet_prints_nccl_tests_lines_alone(capsys, tmp_path):
    loud = perf(capsys, "broadcast_perf", "-b", "8", "-e", "1M", "-f", "4", "-g", "8")
    quiet = perf(capsys, "broadcast_perf", "-b", "8", "-e", "1M", "-f", "4", "-g", "8", "--nccl-tests-only",
                 "-J", str(tmp_path / "q.json"))
    assert "# simcomm:" in loud and "simcomm" not in quiet
    assert [x for x in loud.splitlines() if not x.startswith("# simcomm:")] == quiet.splitlines()
    [log] = read_text(quiet)
    assert log.comments == [] and log.rows[0]["root"] == 0
    assert "simcomm" not in (tmp_path / "q.json").read_text()
    assert perf(capsys, "broadcast_perf", "-b", "8", "-e", "1M", "-f", "4", "-g", "8", "--quiet") == quiet


@pytest.mark.parametrize("token,width,ok", [("110.07", 7, True), ("110.1", 7, False), ("15943.8", 7, True),
                                            ("15944", 7, False), ("123457", 7, True), ("479.16", 6, True),
                                            ("1000.0", 6, True), ("1000", 6, False), ("10000.00", 7, False)])
def test_the_readers_rounding_rule(token, width, ok):
    if ok:
        check_rounding(token, width)
    else:
        with pytest.raises(ValueError):
            check_rounding(token, width)


def test_the_reader_reads_the_measured_logs():
    """The same reader on every measured log in calibration/ (older layouts too: #wrong as N/A with -c 0,
    trimmed tables with digit separators)."""
    logs = sorted(CALIBRATION.glob("*.log"))
    assert len(logs) >= 30
    for path in logs:
        text = path.read_text()
        [log] = read_text(text)
        assert len(log.rows) == sum(1 for line in text.splitlines() if line.strip() and not line.startswith("#"))
        for row in log.rows:
            assert row["size"] > 0 and row["out_of_place"]["time"] > 0 and row["out_of_place"]["busbw"] >= 0
            assert row["out_of_place"].get("wrong", 0) in (0, None)
