"""simcomm compare: each measured size against the simulation of the same collective, with banded errors."""
import json
import math
from pathlib import Path

import pytest

from simcomm.backends.compare_log import Point, compare_table, gm_abs_error
from simcomm.backends.nccl_log import read_log
from simcomm.cli import main
from simcomm.collective import simulate_collective
from simcomm.errors import SimcommError

LOGS = Path(__file__).parent / "nccl_logs"


def test_geometric_mean_error_is_symmetric():
    assert gm_abs_error([Point(1, 1.0, 2.0), Point(1, 2.0, 1.0)]) == pytest.approx(1.0)
    assert gm_abs_error([Point(1, 1.0, 1.0)]) == 0.0
    assert gm_abs_error([Point(1, 1.0, 1.1), Point(1, 1.0, 1 / 1.1)]) == pytest.approx(0.1)
    assert math.isnan(gm_abs_error([]))


def test_each_row_is_the_simulation_of_that_size():
    (t,) = read_log(LOGS / "current_2x.log")
    cmp = compare_table(t, "hgx-h100")
    assert (cmp.collective, cmp.ranks, cmp.nodes) == ("all_reduce", 4, 1)
    for p, row in zip(cmp.points, t.rows):
        assert p.measured == row.out_of_place.time_us * 1e-6
        assert p.predicted == simulate_collective("all_reduce", row.size, cluster="hgx-h100", ranks=4).time
        assert p.error == pytest.approx(p.predicted / p.measured - 1)
    assert [b[0] for b in cmp.bands()] == ["< 1 MiB", "1-64 MiB"] and cmp.bands()[0][2] == 3
    assert compare_table(t, "hgx-h100", in_place=True).points[0].measured == 19.5e-6


def test_forced_algorithm_and_inferred_ranks():
    (t,) = read_log(LOGS / "wrong_na.log")
    with pytest.raises(SimcommError, match="pass --collective"):
        compare_table(t, "hgx-h100")
    cmp = compare_table(t, "hgx-h100", collective="all_gather", algorithm="ring")
    assert cmp.ranks == 16 and cmp.nodes == 2 and {p.algorithm for p in cmp.points} == {"ring"}
    four = compare_table(t, "hgx-h100", collective="all_gather", nodes=4)
    assert four.nodes == 4 and "4 of 8 GPUs" in four.cluster


def test_cli_table_json_and_plot(tmp_path, capsys):
    log = LOGS / "two_tables.log"
    assert main(["compare", str(log), "--cluster", "hgx-h100", "--ranks", "8", "--table", "1", "--algo", "ring"]) == 0
    out = capsys.readouterr().out
    assert "[all_reduce, forced Ring]" in out and "ring/" in out and "geometric-mean |error|: 1-64 MiB" in out
    png = tmp_path / "c.png"
    assert main(["compare", str(log), "--cluster", "hgx-h100", "--ranks", "8", "--json", "--plot", str(png)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc) == 3 and doc[2]["collective"] == "all_gather" and png.stat().st_size > 10_000
    assert {b["band"] for b in doc[0]["bands"]} == {"1-64 MiB", ">= 64 MiB"}
    assert main(["compare", str(log), "--cluster", "hgx-h100", "--ranks", "8", "--table", "7"]) == 2
    assert "out of range" in capsys.readouterr().err


HEAD = (LOGS / "current_2x.log").read_text().split("        1024")[0]  # everything up to the first row
ROW = ("{size:>12} {count:>12}     float     sum      -1  {time:>8}    0.05    0.08      0    19.50    0.05    0.08"
       "      0\n")


def _log(tmp_path, rows, name="rows.log"):
    path = tmp_path / name
    path.write_text(HEAD + "".join(ROW.format(size=s, count=max(1, s // 4), time=t) for s, t in rows))
    return path


def test_rows_with_bad_times_or_sizes_are_left_out_with_a_note(tmp_path, capsys):
    """Issue 21: a negative, NaN, infinite or zero time (and a zero or > 1 PiB size: its simulation overflowed) is
    left out, and a note on stderr says how many and why."""
    log = _log(tmp_path, [(1024, "20.00"), (1024, "-20.00"), (1024, "nan"), (1024, "inf"), (1024, "0.00"),
                          (2048, "junk"), (0, "20.0"), (10 ** 20, "20.0"), (16384, "21.00")])
    (t,) = read_log(log)
    assert len(t.rows) == 9
    cmp = compare_table(t, "hgx-h100")
    assert [p.size for p in cmp.points] == [1024, 16384]
    assert dict(cmp.dropped) == {"a negative time": 1, "a NaN time": 2, "an infinite time": 1, "a zero time": 1,
                                 "a zero size": 1, "a size beyond 1 PiB": 1}
    assert main(["compare", str(log), "--cluster", "hgx-h100", "--json"]) == 0
    out, err = capsys.readouterr()
    assert (f"note: {log}:12: 7 rows left out: 2 with a NaN time, 1 with a negative time, 1 with an infinite time, "
            "1 with a zero time, 1 with a zero size, 1 with a size beyond 1 PiB") in err
    assert json.loads(out)[0]["dropped"]["a NaN time"] == 2


def test_a_log_with_no_usable_row_is_an_error(tmp_path, capsys):
    log = _log(tmp_path, [(10 ** 20, "20.0")])
    assert main(["compare", str(log), "--cluster", "hgx-h100"]) == 2
    err = capsys.readouterr().err
    assert "1 row left out: 1 with a size beyond 1 PiB" in err and "no row of the log(s) has a usable" in err
    assert "Traceback" not in err


def test_cluster_for_checks_nodes_and_the_rank_count():
    from simcomm.backends.compare_log import cluster_for
    with pytest.raises(SimcommError, match="nodes: expected a whole number from 1 to 32768, got 0"):
        cluster_for("hgx-h100", 8, 0)
    (t,) = read_log(LOGS / "current_2x.log")
    with pytest.raises(SimcommError, match="beyond the 262144 simcomm simulates; pass --ranks"):
        compare_table(t, "hgx-h100", ranks=10 ** 9)


@pytest.mark.parametrize("doc, message", [
    ({"results": [{"size": "big", "time": 1.0}]}, "results\\[0\\]: size must be a whole number, got 'big'"),
    ({"results": [{"size": 8, "time": 1.0, "root": [1]}]}, "results\\[0\\]: root must be a whole number"),
])
def test_json_logs_with_bad_fields_name_them(tmp_path, doc, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SimcommError, match=message):
        read_log(path)


def test_json_times_that_are_not_numbers_are_left_out(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"devices": [{"rank": r} for r in range(8)], "results": [
        {"name": "all_reduce", "size": 1024, "time": "fast"}, {"name": "all_reduce", "size": 2048, "time": 30.0}]}))
    (t,) = read_log(path)
    cmp = compare_table(t, "hgx-h100")
    assert [p.size for p in cmp.points] == [2048] and dict(cmp.dropped) == {"a NaN time": 1}
