"""nccl-tests layout, byte for byte, and the plain/rich tables."""
import numpy as np
import pytest

from simcomm.engine import Simulation
from simcomm.hardware import build_cluster
from simcomm.report.table import nccl_column_header, nccl_row, nccl_table, nccl_time, render, text_table
from simcomm.workloads.perf import PerfRow, run_perf

# The header and a row as nccl-tests (all_reduce_perf) prints them.
HEADER = [  # noqa: E501 - nccl-tests' lines are 121 characters wide
    "#                                                              out-of-place                       in-place          ",  # noqa: E501
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",  # noqa: E501
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",  # noqa: E501
]


def test_header_matches_nccl_tests():
    assert nccl_column_header() == HEADER


def test_row_matches_nccl_tests_widths():
    row = PerfRow("all_reduce", "auto", 8, 2, "float32", "sum", 0, 8, 38.61e-6, "ring", "LL")
    assert nccl_row(row, "float") == ("           8             2     float     sum      -1    38.61    0.00    0.00"
                                      "    N/A    38.61    0.00    0.00    N/A")
    big = PerfRow("broadcast", "auto", 8589934592, 2147483648, "float32", "sum", 0, 8, 46374.6e-6, "ring", "Simple")
    line = nccl_row(big, "float")
    assert line.startswith("  8589934592    2147483648     float    none       0    46375  185.23  185.23")
    assert len(line) == len(nccl_row(row, "float"))


@pytest.mark.parametrize("us,text", [(38.614, "  38.61"), (99.999, " 100.00"), (100.04, "  100.0"),
                                     (9999.94, " 9999.9"), (10000.4, "  10000"), (123456.7, " 123457")])
def test_time_formats(us, text):
    assert nccl_time(us) == text


def test_table_footer_and_busbw_factor():
    c = build_cluster("hgx-h100")
    rows = run_perf(Simulation(c, "steps"), ["all_reduce"], [1 << 20, 1 << 26], algorithms=["ring"])
    for r in rows:
        assert r.busbw == pytest.approx(r.algbw * 2 * 7 / 8)
        assert r.algbw == pytest.approx(r.size / r.time)
    text = nccl_table(rows, c, "float")
    lines = text.splitlines()
    assert lines[0].startswith("# nThread 1 nGpus 8 minBytes 1048576 maxBytes 67108864 step: 2(factor)")
    data = [line for line in lines if not line.startswith("#")]
    assert len(data) == 2 and all(len(line.split()) == 13 for line in data)
    fields = data[1].split()
    assert float(fields[7]) == pytest.approx(rows[1].busbw / 1e9, abs=0.006)
    avg = np.mean([r.busbw for r in rows]) / 1e9
    assert f"# Avg bus bandwidth    : {avg:g} " in lines
    assert "# Out of bounds values : 0 OK" in lines


def test_text_table_aligns_and_rich_renders():
    text = text_table(["name", "value"], [("a", 1.5), ("bb", 10.25)], "title")
    assert text.splitlines() == ["title", "name  value", "----  -----", "a      1.50", "bb    10.25"]
    out = render([("t", ["x", "y"], [("[0x00]", 1)])], rich=True, width=60)
    assert "[0x00]" in out and "\x1b[" in out  # markup is not interpreted; colours are on
    assert render(["plain", ("t", ["x"], [(1,)])], rich=False).startswith("plain\nt\nx")
