"""The step model's example scripts: predictions beside published figures, and the cost-growth sweep's output."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "training"


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
