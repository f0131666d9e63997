"""nccl-tests' output, byte for byte its 2.19.6 layout, and its -J JSON."""
import json

import numpy as np
import pytest

from simcomm.session import Session
from simcomm.hardware import build_cluster
from simcomm.report.nccl_tests import (Header, nccl_column_header, nccl_json, nccl_output, nccl_row, nccl_table,
                                       nccl_time)
from simcomm.workloads.perf import PerfRow, run_perf


def row(collective, size, count, ranks, time, algorithm, protocol):
    """A row as a run would record it (a collective of `time` seconds from t = 0)."""
    return PerfRow(collective, ranks, size, count, "float32", "sum", 0, algorithm, protocol, None, 0.0, time)

# The header and a row as nccl-tests (all_reduce_perf) prints them.
HEADER = [  # noqa: E501 - nccl-tests' lines are 121 characters wide
    "#                                                              out-of-place                       in-place          ",  # noqa: E501
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",  # noqa: E501
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",  # noqa: E501
]


def test_header_matches_nccl_tests():
    assert nccl_column_header() == HEADER


def test_row_matches_nccl_tests_widths():
    small = row("all_reduce", 8, 2, 8, 38.61e-6, "ring", "LL")
    assert nccl_row(small, "float") == ("           8             2     float     sum      -1    38.61    0.00    0.00"
                                        "       0    38.61    0.00    0.00       0")
    assert nccl_row(small, "float", validation=0) == ("           8             2     float     sum      -1    38.61    "
                                                      "0.00    0.00    N/A    38.61    0.00    0.00    N/A")
    big = row("broadcast", 8589934592, 2147483648, 8, 46374.6e-6, "ring", "Simple")
    line = nccl_row(big, "float")
    assert line.startswith("  8589934592    2147483648     float    none       0  46374.6  185.23  185.23")
    assert len(line) == len(nccl_row(small, "float"))


@pytest.mark.parametrize("us,text", [(38.614, "  38.61"), (99.999, " 100.00"), (110.0749, " 110.07"),
                                     (9999.94, "9999.94"), (15943.84, "15943.8"), (99999.96, " 100000"),
                                     (123456.7, " 123457")])
def test_time_formats(us, text):
    """nccl-tests >= 2.17.3: 2 decimals where they fit 7 characters, else 1, else none."""
    assert nccl_time(us) == text


@pytest.mark.parametrize("gbps,text", [(0.0, "  0.00"), (479.164, "479.16"), (1000.04, "1000.0"),
                                       (12345.6, " 12346")])
def test_bandwidth_formats(gbps, text):
    from simcomm.report.nccl_tests import nccl_figure
    assert nccl_figure(gbps, 6) == text


def test_table_footer_and_busbw_factor():
    c = build_cluster("hgx-h100")
    rows = run_perf(Session(c, detail="steps"), ["all_reduce"], [1 << 20, 1 << 26], algorithms=["ring"])
    for r in rows:
        assert r.busbw == pytest.approx(r.algbw * 2 * 7 / 8)
        assert r.algbw == pytest.approx(r.size / r.time)
    text = nccl_table(rows, c, "float")
    lines = text.splitlines()
    # the step the rows show (1 MiB to 64 MiB in one step: factor 64), not a default factor 2
    assert lines[2].startswith("# nThread 1 nGpus 8 minBytes 1048576 maxBytes 67108864 step: 64(factor)")
    data = [line for line in lines if not line.startswith("#")]
    assert len(data) == 2 and all(len(line.split()) == 13 for line in data)
    fields = data[1].split()
    assert float(fields[7]) == pytest.approx(rows[1].busbw / 1e9, abs=0.006)
    avg = np.mean([r.busbw for r in rows]) / 1e9
    assert f"# Avg bus bandwidth    : {avg:g} " in lines
    assert "# Out of bounds values : 0 OK" in lines




def test_preamble_start_and_conclusion_lines():
    c = build_cluster("hgx-h100", nodes=2)
    rows = run_perf(Session(c, detail="steps"), ["all_gather"], [1 << 20], ranks=16)
    h = Header("all_gather_perf", threads=2, gpus=1, minbytes=1 << 20, maxbytes=1 << 20, factor=None,
               stepbytes=1 << 20, comments=["a note"])
    lines = nccl_output([(["table note"], rows)], c, 16, h).splitlines()
    assert lines[0] == "# nccl-tests version 2.19.6 nccl-headers=23000 nccl-library=23000"
    assert lines[1] == "# Collective test starting: all_gather_perf"
    assert lines[2] == ("# nThread 2 nGpus 1 minBytes 1048576 maxBytes 1048576 step: 1048576(bytes) warmup iters: 5 "
                        "iters: 20 agg iters: 1 validation: 1 graph: 0")
    assert lines[3:5] == ["#", "# Using devices"]
    assert lines[5] == "#  Rank  0 Group  0 Pid  10000 on         n0 device  0 [0000:01:00] H100-SXM5-80GB"
    assert lines[5 + 15] == "#  Rank 15 Group  0 Pid  10007 on         n1 device  7 [0000:08:00] H100-SXM5-80GB"
    assert "# simcomm: a note" in lines and "# simcomm: table note" in lines
    assert lines[-1] == "# Collective test concluded: all_gather_perf"
    assert lines[-4:-1] == ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {rows[0].busbw / 1e9:g} ", "#"]


def test_json_mirrors_the_table():
    c = build_cluster("hgx-h100")
    rows = run_perf(Session(c, detail="steps"), ["all_reduce"], [1 << 10, 1 << 20], algorithms=["ring"])
    doc = json.loads(json.dumps(nccl_json([([], rows)], c, 8, Header("all_reduce_perf", gpus=8, minbytes=1 << 10,
                                                                       maxbytes=1 << 20, factor=1024.0))))
    assert doc["config"]["ngpus"] == 8 and doc["config"]["step_factor"] == 1024 and len(doc["devices"]) == 8
    assert [r["size"] for r in doc["results"]] == [1 << 10, 1 << 20]
    for r, row in zip(doc["results"], rows):
        assert r["out_of_place"] == r["in_place"]
        assert r["out_of_place"]["time"] == pytest.approx(row.time * 1e6)
        assert r["out_of_place"]["bus_bw"] == pytest.approx(row.busbw / 1e9)
        assert r["type"] == "float" and r["redop"] == "sum" and r["root"] == "-1" and r["out_of_place"]["nwrong"] == 0
        assert r["simcomm"]["algorithm"] == "ring"
    assert doc["average_bus_bandwidth"]["bandwidth"] == pytest.approx(np.mean([r.busbw for r in rows]) / 1e9)


def test_the_parameter_line_states_the_step_the_rows_took():
    """Issue 11: headers said factor 2 whatever the sizes (an -i series too)."""
    from simcomm.report.nccl_tests import size_step
    assert size_step([1 << 20, 2 << 20, 3 << 20, 4 << 20]) == (None, 1 << 20)  # -i 1M
    assert size_step([8, 32, 128]) == (4.0, 0) and size_step([1 << 20]) == (1.0, 0)
    assert size_step([8, 16, 48]) == (1.0, 0)  # neither: an explicit list
    c = build_cluster("hgx-h100")
    rows = run_perf(Session(c, detail="steps"), ["all_reduce"], [1 << 20, 2 << 20, 3 << 20], algorithms=["ring"])
    assert "step: 1048576(bytes)" in nccl_table(rows, c).splitlines()[2]
    assert "step: 2(factor)" in nccl_table(rows[:2], c).splitlines()[2]
    assert "step: 8(factor)" in nccl_table(rows, c, factor=8.0).splitlines()[2]
