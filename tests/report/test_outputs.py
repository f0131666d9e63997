"""PNG plots and JSON results."""
import json
import math

from simcomm.report import result_json, write_outputs
from simcomm.report.json_out import dumps, plain
from simcomm.scenario import load_text
from simcomm.workloads import run_scenario

PNG = b"\x89PNG\r\n\x1a\n"
TEXT = """\
cluster: {preset: hgx-h100}
workload: {kind: perf, collectives: [all_reduce, all_gather], sizes: [64KiB, 16MiB], algorithms: [auto, ring]}
"""


def test_plots_trace_and_json_are_written(tmp_path):
    result = run_scenario(load_text(TEXT, "t.yaml"))
    written = write_outputs(result, tmp_path, "r.json", "trace.json", ["busbw", "timeline", "links"])
    assert set(written) == {"json", "trace", "busbw", "timeline", "links"}
    for name in ("busbw", "timeline", "links"):
        data = (tmp_path / f"{name}.png").read_bytes()
        assert data.startswith(PNG) and len(data) > 5000
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["workload"] == "perf" and len(doc["rows"]) == 8 and doc["cluster"]["ranks"] == 8
    for row in doc["rows"]:
        assert row["time"] > 0 and math.isfinite(row["busbw"]) and row["busbw"] > 0
    assert doc["outputs"]["trace"].endswith("trace.json")
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]


def test_json_is_plain_and_deterministic():
    import numpy as np
    assert plain({"a": np.float64(1.5), "b": (1, np.int64(2)), "c": float("nan"), 3: object}) == \
        {"a": 1.5, "b": [1, 2], "c": None, "3": repr(object)}
    one = dumps(result_json(run_scenario(load_text(TEXT, "t.yaml"))))
    two = dumps(result_json(run_scenario(load_text(TEXT, "t.yaml"))))
    assert one == two and "wall" not in one

