"""The step model's example scripts: predictions beside published figures (and docs/training.md's table of them,
which must be what the script prints), and the cost-growth sweep's output."""
import json
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "examples" / "training"
DOC = (ROOT / "docs" / "training.md").read_text()
# the rows that take up to about 2 s each (the 280- to 3,072-GPU pipelines of 35 and 64 stages take 3-12 s)
FAST = ["n1.7", "n3.6", "n7.5", "n18", "n39", "n76", "n145", "n310", "g175", "k22", "k175", "l8k", "l16k", "l16kcp",
        "ms12k"]


def run(script, *args) -> str:
    out = subprocess.run([sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_published_rows_stay_close_to_the_papers():
    rows = [json.loads(line) for line in run("step_vs_published.py", "k22", "n1.7", "--json").splitlines()]
    assert [r["key"] for r in rows] == ["n1.7", "k22"]
    for r in rows:
        assert r["predicted"] == pytest.approx(r["published"] * (1 + r["error"])) and abs(r["error"]) < 0.15, r
        assert r["fits"] and sum(r["breakdown"].values()) == pytest.approx(1.0)


def test_unknown_rows_are_refused():
    out = subprocess.run([sys.executable, str(SCRIPTS / "step_vs_published.py"), "zz"], capture_output=True,
                         text=True)
    assert out.returncode == 2 and "unknown row" in out.stderr


def doc_table(header: str) -> list[str]:
    """The rows of docs/training.md's table of published figures (after its header and alignment lines)."""
    lines = DOC.splitlines()
    rows = []
    for line in lines[lines.index(header) + 2:]:
        if not line.startswith("| "):
            break
        rows.append(line)
    return rows


def test_the_docs_table_is_what_the_script_prints():
    out = run("step_vs_published.py", "--markdown", *FAST).splitlines()
    lines = DOC.splitlines()
    assert lines[lines.index(out[0]) + 1] == out[1]  # the same header and alignment row
    printed = [line for line in out[2:] if line.startswith("| ")]
    assert len(printed) == len(FAST)
    table = doc_table(out[0])
    for line in printed:  # same model, layout, metric and figures, to the printed rounding
        assert line in table, f"docs/training.md is stale; the script prints\n{line}"
    # every row of the script is in the docs, in the script's order, and the mean line is the rows' mean
    keys = [row[0] for row in runpy.run_path(str(SCRIPTS / "step_vs_published.py"))["ROWS"]]
    assert len(table) == len(keys) and [table.index(line) for line in printed] == sorted(
        keys.index(k) for k in FAST)
    errors = [float(line.rstrip(" |").rsplit("| ", 1)[1].rstrip("%")) for line in table]
    mean = re.search(rf"Mean \|error\| over the {len(table)} rows: ([\d.]+)%", DOC)
    assert mean and float(mean.group(1)) == pytest.approx(sum(map(abs, errors)) / len(errors), abs=0.1)
    worst = re.search(r"worst ([+-][\d.]+)% \(.*?\), ([+-][\d.]+)%", DOC)
    assert worst and (float(worst.group(1)), float(worst.group(2))) == (max(errors), min(errors))
    # the Llama rows with the causal halving, as the docs quote them
    causal = re.search(r"TFLOP/s per GPU with Megatron's causal halving of core attention: (.*)\.", "\n".join(out))
    quoted = re.search(r"with the causal halving the predictions are (\d+), (\d+) and (\d+) TFLOP/s", DOC)
    assert causal and quoted
    assert causal.group(1) == "l8k {}, l16k {}, l16kcp {}".format(*quoted.groups())


def test_the_cost_growth_sweep_grows_as_the_docs_say():
    lines = [line.split(" ", 1) for line in run("step_cost_growth.py", "--quick").splitlines()]
    rows: dict[str, list[dict]] = {}
    for what, doc in lines:
        rows.setdefault(what, []).append(json.loads(doc))
    assert {k: len(v) for k, v in rows.items()} == {"gpus": 2, "layers": 2, "microbatches": 2, "stages": 2}
    gpus, layers, mbs, stages = rows["gpus"], rows["layers"], rows["microbatches"], rows["stages"]
    assert [r["gpus"] for r in gpus] == [32, 64] and all(r["events"] > 0 and r["wall"] > 0 for v in rows.values()
                                                          for r in v)
    # data parallelism adds real data-parallel collectives (one replica is simulated), not passes or sends
    assert gpus[0]["real"] < gpus[1]["real"] and gpus[0]["sends"] == gpus[1]["sends"]
    # twice the layers: the same passes and sends, about twice the compute per pass
    assert layers[1]["sends"] == layers[0]["sends"] and 1.5 < layers[1]["step_time"] / layers[0]["step_time"] < 2
    # twice the micro-batches: twice the sends, more events, a longer step
    assert mbs[1]["sends"] == 2 * mbs[0]["sends"] and mbs[1]["events"] > mbs[0]["events"]
    assert mbs[1]["step_time"] > mbs[0]["step_time"]
    # stages: (pp - 1) boundaries, a forward and a backward send per micro-batch
    assert [r["sends"] for r in stages] == [2 * (pp - 1) * 4 for pp in (2, 4)]
