"""The shipped training examples run as scripts and say what they promise."""
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "training"


def run(script, *args) -> str:
    out = subprocess.run([sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_gpt_script_matches_serial_training():
    text = run("gpt.py", "--tp", "2", "--pp", "2", "--micro-batch", "4", "--sequence-parallel", "--steps", "2")
    assert "tp=2 cp=1 dp=1 pp=2 (4 ranks), 2 microbatches of 4, 1f1b, zero 0" in text
    steps = [line.split() for line in text.splitlines() if line.startswith("step ")]
    assert len(steps) == 2 and all(float(s[3]) == float(s[5]) for s in steps)  # loss printed to 12 digits
    worst = float(text.rsplit(":", 1)[1])
    assert worst < 1e-12


def test_lecture_script_prints_each_ranks_loss_and_traffic():
    text = run("lecture.py", "pipeline_parallelism", "--ranks", "2", "--steps", "2")
    lines = text.splitlines()
    assert lines[0].startswith("rank 0: loss per step - -; sent 0 B in collectives, 8 KiB point-to-point")
    assert lines[1].startswith("rank 1: loss per step 0.") and lines[2].startswith("simulated ")


def test_moe_imbalance_script_prints_the_table_in_the_docs():
    text = run("moe_imbalance.py", "--markdown")
    docs = (SCRIPTS.parents[1] / "docs" / "training.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 5 and all(row in docs for row in rows)


def test_deepseek_v3_ablations_script_prints_the_table_in_the_docs():
    """Each overlap mechanism on and off (about 20 s): the rows docs/training.md shows, the scenario's among them,
    every mechanism making the step shorter."""
    text = run("deepseek_v3_ablations.py", "--markdown")
    docs = (SCRIPTS.parents[1] / "docs" / "training.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 9 and all(row in docs for row in rows)
    steps = [float(row.split("|")[2]) for row in rows[2:]]
    assert all(b <= a for a, b in zip(steps, steps[1:]))
