"""simcomm compare --systems: every sweep of a measured system on its preset, errors pooled per system, sweeps with
a known gap pooled apart; and the pooled line of a multi-log compare."""
import json
import textwrap
from pathlib import Path

import pytest

from simcomm.backends.compare_log import band_errors, compare_table
from simcomm.backends.compare_systems import compare_systems
from simcomm.backends.nccl_log import read_log
from simcomm.cli import main
from simcomm.errors import SimcommError

LOGS = Path(__file__).parent / "nccl_logs"


def systems_file(tmp_path, body: str) -> Path:
    path = tmp_path / "systems.yaml"
    path.write_text(f"logs: {LOGS}\n" + textwrap.dedent(body))
    return path


SYSTEMS = """\
systems:
  box:
    preset: hgx-h100
    source: "a test box"
    sweeps:
      - {log: current_2x, collective: all_reduce, ranks: 4}
      - {log: trimmed.log, collective: all_reduce, ranks: 8, known_gap: "the gap"}
  pair:
    preset: dgx-a100
    nodes: 2
    sweeps:
      - {log: trimmed, collective: all_reduce, ranks: 16}
"""


def test_pooled_per_system_with_gaps_apart(tmp_path):
    box, pair = compare_systems(systems_file(tmp_path, SYSTEMS))
    (t,) = read_log(LOGS / "current_2x.log")
    alone = compare_table(t, "hgx-h100", collective="all_reduce", ranks=4)
    assert [p.predicted for p in box.sweeps[0].points] == [p.predicted for p in alone.points]
    assert box.bands() == alone.bands() and len(box.gaps) == 1 and box.gaps[0][1] == "the gap"
    assert box.bands(gaps=True) == band_errors(box.gaps[0][0].points)
    assert (pair.nodes, pair.sweeps[0].nodes, pair.sweeps[0].ranks) == (2, 2, 16)
    assert [s.name for s in compare_systems(systems_file(tmp_path, SYSTEMS), ["pair"])] == ["pair"]


def test_bad_systems_files_name_the_key(tmp_path):
    with pytest.raises(SimcommError, match="no system 'nope'; it has box, pair"):
        compare_systems(systems_file(tmp_path, SYSTEMS), ["nope"])
    with pytest.raises(SimcommError, match=r"systems.x.sweeps\[0\]: missing ranks"):
        compare_systems(systems_file(tmp_path, "systems:\n  x: {preset: hgx-h100, sweeps: [{log: a, collective: "
                                               "all_reduce}]}\n"))
    with pytest.raises(SimcommError, match="expected a mapping 'systems'"):
        compare_systems(systems_file(tmp_path, "sweeps: []\n"))


def test_cli_systems_and_pooled_line(tmp_path, capsys):
    path = systems_file(tmp_path, SYSTEMS)
    assert main(["compare", "--systems", str(path)]) == 0
    out = capsys.readouterr().out
    assert "box: hgx-h100, 1 node(s)  (a test box)" in out and "current_2x.log: all_reduce, 4 ranks:" in out
    assert "trimmed.log: all_reduce, 8 ranks (known gap):" in out and "known gaps, pooled over 1 sweep(s)" in out
    assert "pooled over 1 sweep(s): geometric-mean |error|: < 1 MiB" in out and "pair: dgx-a100, 2 node(s)" in out
    assert main(["compare", "--systems", str(path), "--system", "box", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["system"] == "box" and doc["known_gap_bands"] and doc["sweeps"][0]["ranks"] == 4
    assert main(["compare", "--systems", str(path), "--cluster", "hgx-h100"]) == 2
    assert "pass no LOG or --cluster" in capsys.readouterr().err
    assert main(["compare", str(LOGS / "current_2x.log")]) == 2
    assert "needs LOG... and --cluster" in capsys.readouterr().err
    assert main(["compare", str(LOGS / "two_tables.log"), "--cluster", "hgx-h100", "--ranks", "8"]) == 0
    out = capsys.readouterr().out
    tables = [compare_table(t, "hgx-h100", ranks=8) for t in read_log(LOGS / "two_tables.log")]
    pooled = band_errors([p for c in tables for p in c.points])
    assert f"pooled over 3 tables: geometric-mean |error|: 1-64 MiB {pooled[0][1] * 100:.1f}%" in out
