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
