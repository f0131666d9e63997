"""`simcomm calibrate --from-log`: nccl-tests logs that name their collective and ranks, and those that do not
(--collective / --ranks, or an error that says which to pass)."""
from pathlib import Path

import pytest

from simcomm.backends.compare_log import cluster_for
from simcomm.cli import main
from simcomm.errors import SimcommError
from simcomm.hardware import load_profile

LOGS = Path(__file__).resolve().parents[1] / "backends" / "nccl_logs"
# size and time only: neither the collective nor the ranks can be told from it
BARE = """#       size      time
#        (B)      (us)
       32768     36.10
     1048576     44.20
    33554432    212.00
  1073741824   5206.00
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_log_that_names_neither_needs_collective(capsys):
    code, out, err = run(capsys, "calibrate", "--from-log", str(LOGS / "trimmed.log"), "--cluster", "dgx-a100")
    assert code == 2 and out == ""
    assert "trimmed.log" in err and "does not say which collective" in err and "pass --collective" in err


def test_collective_given_ranks_from_busbw(tmp_path, capsys):
    prof = tmp_path / "a100.yaml"
    code, out, err = run(capsys, "calibrate", "--from-log", str(LOGS / "trimmed.log"), "--cluster", "dgx-a100",
                         "--collective", "allreduce", "--out", str(prof))
    assert code == 0, err
    assert "3 measured sizes from 1 log(s) on dgx-a100" in out
    assert "all_reduce, 8 ranks on 1 node(s)" in out  # busbw / algbw = 1.75 -> 8 ranks
    assert "median |error| held back (every other size): before" in out and f"wrote profile: {prof}" in out
    p = load_profile(prof)
    assert p.preset == "dgx-a100" and p.fit["held_back_points"] == 1 and p.fit["training_points"] == 2
    assert p.tuning.launch_overhead > 0 and "ring" in dict(p.tuning.efficiency)


def test_ranks_when_the_log_cannot_say(tmp_path, capsys):
    log = tmp_path / "bare.log"
    log.write_text(BARE)
    code, _, err = run(capsys, "calibrate", "--from-log", str(log), "--cluster", "hgx-h100",
                       "--collective", "all_reduce")
    assert code == 2 and "bare.log" in err and "does not say how many ranks ran; pass --ranks" in err
    code, out, err = run(capsys, "calibrate", "--from-log", str(log), "--cluster", "hgx-h100",
                         "--collective", "all_reduce", "--ranks", "8")
    assert code == 0, err
    assert "4 measured sizes" in out and "all_reduce, 8 ranks on 1 node(s)" in out
    code, _, err = run(capsys, "calibrate", "--from-log", str(log), "--cluster", "hgx-h100",
                       "--collective", "all_reduce", "--ranks", "2,4")
    assert code == 2 and "--ranks 2,4" in err and "whole number" in err


def test_cluster_for_needs_the_rank_count():
    with pytest.raises(SimcommError, match="rank count .* unknown.*pass --ranks"):
        cluster_for("hgx-h100", None, None)


def test_a_multi_node_log_also_fits_the_fabric(tmp_path, capsys):
    """Across nodes the NICs' latency and the network's efficiency ("net") are fitted too."""
    prof = tmp_path / "two.yaml"
    code, out, err = run(capsys, "calibrate", "--from-log", str(LOGS / "wrong_na.log"), "--cluster", "hgx-h100",
                         "--collective", "all_gather", "--nodes", "2", "--out", str(prof))
    assert code == 0, err
    assert "all_gather, 16 ranks on 2 node(s)" in out and "nic_latency=" in out and "step_overhead=" in out
    assert "efficiency.net=" in out
    p = load_profile(prof)
    assert set(p.overrides) == {"nic_latency"} and 1e-7 <= p.overrides["nic_latency"] <= 1e-4
    assert 0.3 <= dict(p.tuning.efficiency)["net"] <= 1.5


def test_from_log_mistakes_are_clean_errors(tmp_path, capsys):
    """Issue 21: --algo zzz (was a KeyError), a log of one size (a StatisticsError), --nodes 0 (ZeroDivisionError)."""
    log = LOGS / "current_2x.log"
    assert main(["calibrate", "--from-log", str(log), "--cluster", "hgx-h100", "--algo", "zzz"]) == 2
    assert "--algo 'zzz' is not an algorithm for all_reduce; expected one of" in capsys.readouterr().err
    one = tmp_path / "one.log"
    text = log.read_text()
    one.write_text(text.split("       16384")[0])
    assert main(["calibrate", "--from-log", str(one), "--cluster", "hgx-h100"]) == 2
    assert "calibrate needs a sweep of at least 2 measured sizes" in capsys.readouterr().err
    assert main(["calibrate", "--from-log", str(log), "--cluster", "hgx-h100", "--nodes", "0"]) == 2
    assert "argument --nodes: expected a whole number from 1 to 32768, got 0" in capsys.readouterr().err


def test_from_log_notes_the_rows_it_leaves_out(tmp_path, capsys):
    log = tmp_path / "neg.log"
    text = (LOGS / "current_2x.log").read_text()
    log.write_text(text.replace("    20.00    0.05", "   -20.00    0.05", 1))
    assert main(["calibrate", "--from-log", str(log), "--cluster", "hgx-h100"]) == 0
    out, err = capsys.readouterr()
    assert f"note: {log}: 1 row left out: 1 with a negative time" in err and "calibrate: 3 measured sizes" in out
