"""The nccl-tests log parser: one sample per form nccl-tests (and launchers around it) print."""
import json
from pathlib import Path

import pytest

from simcomm.backends.nccl_log import LogError, parse_log, read_log

LOGS = Path(__file__).parent / "nccl_logs"


def test_current_2x_format_with_versions_devices_and_footer():
    (t,) = read_log(LOGS / "current_2x.log")
    assert t.collective == "all_reduce" and t.ranks == 4 and t.dtype == "float"
    assert t.meta["nccl_tests_version"] == "2.17.9" and t.meta["nccl_version"] == "22602"
    assert t.meta["avg_busbw"] == 29.8575 and t.meta["out_of_bounds"] == "0 OK"
    assert [r.size for r in t.rows] == [1024, 16384, 262144, 4194304]
    r = t.rows[-1]
    assert (r.count, r.redop, r.root) == (1048576, "sum", -1)
    assert (r.out_of_place.time_us, r.out_of_place.algbw, r.out_of_place.busbw, r.out_of_place.wrong) == \
        (61.0, 68.76, 103.14, "0")
    assert r.in_place.time_us == 60.5 and r.figures(in_place=True).busbw == 103.99


@pytest.mark.parametrize("name", ["srun_label.log", "openmpi_tag.log"])
def test_launcher_prefixes_are_stripped(name):
    (t,) = read_log(LOGS / name)
    (ref,) = read_log(LOGS / "current_2x.log")
    assert t.rows == ref.rows and t.ranks == 4 and t.collective == "all_reduce"


def test_wrong_column_not_applicable():
    (t,) = read_log(LOGS / "wrong_na.log")
    assert t.collective is None and t.ranks is None  # nothing says: the caller must
    assert [r.out_of_place.wrong for r in t.rows] == ["N/A"] * 3
    assert t.inferred_ranks("all_gather") == 16  # busbw / algbw = 15/16
    assert t.rows[0].in_place.time_us == 164.1


def test_old_format_without_root_and_with_error_column():
    (t,) = read_log(LOGS / "old_error_column.log")
    assert t.collective == "all_reduce"  # from the echoed command line
    assert t.rows[1].root is None and t.rows[1].out_of_place.wrong == "5e-07"
    assert t.rows[1].out_of_place.time_us == 143.4 and t.rows[1].in_place.time_us == 143.1
    assert t.inferred_ranks() == 32  # busbw/algbw = 1.9375, as nccl-tests' 2(n-1)/n


def test_trimmed_table_with_digit_separators():
    (t,) = read_log(LOGS / "trimmed.log")
    assert [r.size for r in t.rows] == [32768, 1048576, 1073741824]
    assert t.rows[2].out_of_place.time_us == 8203.9 and t.rows[2].in_place is None and t.rows[2].count is None


def test_titled_tables_under_one_header():
    tables = read_log(LOGS / "two_tables.log")
    assert [(t.collective, t.title, len(t.rows)) for t in tables] == [
        ("all_reduce", "all_reduce, NVLS enabled", 2), ("all_reduce", "all_reduce, forced Ring", 2),
        ("all_gather", "all_gather, Ring (size = total gathered buffer)", 1)]
    assert tables[1].rows[1].out_of_place.time_us == 366.74


def test_dash_j_json():
    (t,) = read_log(LOGS / "dash_j.json")
    assert t.collective == "reduce_scatter" and t.ranks == 8
    assert [r.out_of_place.time_us for r in t.rows] == [118.62, 380.40]
    assert t.rows[1].in_place.busbw == 309.28 and t.meta["avg_busbw"] == 278.52
    assert t.rows[0].root == -1 and t.rows[0].out_of_place.wrong == "0" and t.meta["nccl_tests_version"] == "2.19.6"


def test_simcomm_perf_output_reads_back(capsys):
    from simcomm.cli import main
    assert main(["perf", "all_gather", "-b", "1M", "-e", "64M", "-f", "4", "-g", "8"]) == 0
    (t,) = parse_log(capsys.readouterr().out, "perf")
    assert t.collective == "all_gather" and t.ranks == 8 and [r.size for r in t.rows] == [1 << 20, 4 << 20,
                                                                                           16 << 20, 64 << 20]
    assert all(r.out_of_place.wrong == "0" and r.out_of_place.time_us > 0 for r in t.rows)
    assert t.meta["nccl_tests_version"] == "2.19.6"


def test_bad_input_is_named():
    with pytest.raises(LogError, match="x.log: no nccl-tests table found"):
        parse_log("# nThread 1 nGpus 1\nhello\n", "x.log")
    with pytest.raises(LogError, match="y.json:1: invalid JSON"):
        parse_log("{nope", "y.json")
    with pytest.raises(LogError, match="results\\[0\\] has no out-of-place time"):
        parse_log(json.dumps({"results": [{"size": 8}]}), "z.json")
    with pytest.raises(LogError, match="cannot read"):
        read_log(LOGS / "missing.log")


def test_ranks_are_inferred_only_when_the_printed_figures_allow_one_count():
    """busbw / algbw is printed to 0.01 GB/s: 199.00 / 100.00 allows any of about 180-220 ranks (it had given 200, or
    a cluster of 66,666 ranks for 199.997 / 100.000); a count every row allows is taken, as is none otherwise."""
    def table(*pairs, kind="all_reduce"):
        from simcomm.backends.nccl_log import Figures, Row, Table
        return Table([Row(1 << (20 + i), None, "float", "sum", -1, Figures(10.0, a, b)) for i, (a, b) in
                      enumerate(pairs)], collective=kind)
    assert table((100.0, 199.0)).inferred_ranks() is None
    assert table((100.0, 175.0)).inferred_ranks() == 8
    assert table((1.0, 1.75), (100.0, 175.0)).inferred_ranks() == 8
    assert table((100.0, 175.0), (100.0, 150.0)).inferred_ranks() is None  # rows that disagree
    assert table((0.0, 0.0)).inferred_ranks() is None
    # all_gather's busbw / algbw stays below 1: a row above it allows no count (it was an OverflowError)
    assert table((0.05, 0.08), (100.0, 93.75), kind="all_gather").inferred_ranks() is None
    assert table((100.0, 93.75), kind="all_gather").inferred_ranks() == 16
