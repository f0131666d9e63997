"""Every numeric command-line option of every subcommand is range-checked where it is read (issue 21), by one
mechanism (units.whole / wholes / positive / sizes as argparse types): a zero, negative, fractional or huge count,
rate, node or job number is a usage error naming the option, never silently replaced."""
import argparse

import pytest

from simcomm.bench import build_parser as bench_parser
from simcomm.cli import build_parser, main
from simcomm.cli.options import usable_cores
from simcomm.units import UnitError, parse_positive, parse_whole


def _parsers():
    top = build_parser()
    (sub,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    return {"simcomm": top, **{f"simcomm {k}": p for k, p in sub.choices.items()}, "simcomm bench": bench_parser()}


def test_no_option_reads_a_bare_int_or_float():
    """The mechanism, closed: a number read with type=int or float would take 0, -1 or 10**30 silently."""
    bare = [f"{name} {a.option_strings or a.dest}" for name, p in _parsers().items() for a in p._actions
            if a.type in (int, float)]
    assert not bare, f"options read as a bare int/float, with no range: {bare}"


CORES = usable_cores()


@pytest.mark.parametrize("argv, message", [
    (["plan", "s.yaml", "--jobs", "0"], f"argument --jobs: expected a whole number from 1 to {CORES}, got 0"),
    (["plan", "s.yaml", "--jobs", "-1"], f"argument --jobs: expected a whole number from 1 to {CORES}, got -1"),
    (["plan", "s.yaml", "--jobs", "1000"], f"from 1 to {CORES}, got 1000 (at most this host's usable cores"),
    (["plan", "s.yaml", "--top", "0"], "argument --top: expected a whole number >= 1, got 0"),
    (["plan", "s.yaml", "--simulate", "-2"], "argument --simulate: expected a whole number >= 0, got -2"),
    (["plan", "s.yaml", "--max-simulate", "0"], "argument --max-simulate: expected a whole number >= 1, got 0"),
    (["plan", "s.yaml", "--tp", "2,0"], "argument --tp: expected whole numbers from 1 to 262144, separated by "
                                        "commas, got '2,0'"),
    (["plan", "s.yaml", "--mbs", "1.5"], "argument --mbs: expected whole numbers >= 1"),
    (["plan", "s.yaml", "--zero", "4"], "argument --zero: expected whole numbers from 0 to 3"),
    (["plan", "s.yaml", "--max-virtual", "0"], "argument --max-virtual: expected a whole number >= 1, got 0"),
    (["sweep", "s.yaml", "--jobs", "0"], f"argument --jobs: expected a whole number from 1 to {CORES}, got 0"),
    (["presets", "hgx-h100", "--nodes", "0"], "argument --nodes: expected a whole number from 1 to 32768, got 0"),
    (["compare", "l.log", "--nodes", "0"], "argument --nodes: expected a whole number from 1 to 32768, got 0"),
    (["compare", "l.log", "--ranks", "-4"], "argument --ranks: expected a whole number from 1 to 262144, got -4"),
    (["compare", "l.log", "--table", "-1"], "argument --table: expected a whole number >= 0, got -1"),
    (["calibrate", "--from-log", "l.log", "--nodes", "0"], "argument --nodes: expected a whole number from 1 to"),
    (["calibrate", "--rounds", "0"], "argument --rounds: expected a whole number from 1 to 1000, got 0"),
    (["calibrate", "--repeat", "1e3"], "argument --repeat: expected a whole number from 1 to 100, got '1e3'"),
    (["calibrate", "--ranks", "2,1"], "argument --ranks: expected whole numbers from 2 to 262144"),
    (["calibrate", "--sizes", "4K,2G"], "argument --sizes: expected sizes from 1 B to 1 GiB, got '2G'"),
    (["calibrate", "--sizes", "0"], "argument --sizes: expected sizes from 1 B to 1 GiB, got '0'"),
    (["launch", "--cluster", "cpu-host", "--nproc-per-node", "0", "x.py"],
     "argument --nproc-per-node/--nproc_per_node: expected a whole number from 1 to 4096, got 0"),
    (["launch", "--cluster", "cpu-host", "--nnodes", "99999", "x.py"],
     "argument --nnodes: expected a whole number from 1 to 32768, got 99999"),
    (["launch", "--cluster", "cpu-host", "--flop-rate", "0", "x.py"],
     "argument --flop-rate: expected a finite number > 0, got '0'"),
    (["launch", "--cluster", "cpu-host", "--flop-rate", "nan", "x.py"],
     "argument --flop-rate: expected a finite number > 0, got 'nan'"),
    (["bench", "smpi", "--repeats", "0"], "argument --repeats: expected a whole number from 1 to 100, got 0"),
    (["bench", "smpi", "--ranks", "8,0"], "argument --ranks: expected whole numbers from 2 to 16384"),
    (["plan", "s.yaml", "--jobs", "9" * 40], "got a 133-bit whole number"),
])
def test_bad_numbers_are_usage_errors_naming_the_option(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_plan_simulate_bounds_agree(tmp_path, capsys):
    (tmp_path / "s.yaml").write_text("cluster: {preset: hgx-h100}\nworkload: {kind: training, model: gpt3-1.3b, "
                                     "global_batch_size: 8}\n")
    assert main(["plan", str(tmp_path / "s.yaml"), "--simulate", "9", "--max-simulate", "4"]) == 2
    assert "--simulate 9 is more than --max-simulate 4" in capsys.readouterr().err


@pytest.mark.parametrize("text, low, high, message", [
    ("0", 1, None, "expected a whole number >= 1, got 0"),
    ("2.0", 1, None, "expected a whole number >= 1, got '2.0'"),
    (" 7 ", 1, 8, None),
    (True, 0, None, "expected a whole number >= 0, got True"),
    ("9", 1, lambda: 8, "expected a whole number from 1 to 8, got 9"),
])
def test_parse_whole(text, low, high, message):
    if message is None:
        assert parse_whole(text, "n", low, high) == 7
        return
    with pytest.raises(UnitError, match=f"^n: {message}"):
        parse_whole(text, "n", low, high)


@pytest.mark.parametrize("text", ["0", "-1", "inf", "nan", "1e999", "x", "", None, True])
def test_parse_positive_refuses(text):
    with pytest.raises(UnitError, match="rate: expected a finite number > 0"):
        parse_positive(text, "rate")
