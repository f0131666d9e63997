"""The README works from any directory (issue 11): its Python snippets, its `simcomm run` commands, and shipped
scenarios by name (`simcomm run quickstart`), run from an empty temporary directory."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simcomm.cli import main, shipped_scenarios

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
SNIPPETS = re.findall(r"```python\n(.*?)```", README, re.S)
RUN_COMMANDS = [line.split("simcomm run ", 1)[1].split("&&")[0].split()
                for block in re.findall(r"```bash\n(.*?)```", README, re.S)
                for line in block.splitlines() if "simcomm run " in line]


def test_the_readme_has_what_these_tests_run():
    assert len(SNIPPETS) >= 2 and RUN_COMMANDS and ["scenarios/quickstart.yaml"] in RUN_COMMANDS


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.splitlines()[0])
def test_readme_snippets_run_from_another_directory(tmp_path, snippet):
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "Traceback" not in done.stderr


@pytest.mark.parametrize("argv", RUN_COMMANDS + [["quickstart"], ["quickstart.yaml"]], ids=" ".join)
def test_readme_run_commands_and_scenario_names_work_from_another_directory(capsys, monkeypatch, tmp_path, argv):
    monkeypatch.chdir(tmp_path)
    code = main(["run", *argv, "--no-files"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith("scenario quickstart: perf on hgx-h100") and "simulated " in out
    assert list(tmp_path.iterdir()) == []  # --no-files: nothing written here


def test_an_unknown_scenario_name_lists_the_shipped_ones(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "quickstrat"]) == 2
    err = capsys.readouterr().err
    assert "quickstrat: no such scenario file, and no scenario of that name ships with simcomm" in err
    names = shipped_scenarios()
    assert {"quickstart", "train-dp", "hgx-h100-allreduce"} <= set(names)
    assert f"(shipped: {', '.join(names)})" in err


def test_a_file_of_that_name_wins_over_a_shipped_scenario(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").write_text("name: mine\ncluster: {preset: cpu-host}\n"
                                         "workload: {kind: perf, collectives: [all_reduce], sizes: [1KiB]}\n")
    assert main(["run", "quickstart", "--no-files"]) == 0
    assert capsys.readouterr().out.startswith("scenario mine: perf on cpu-host")


def test_the_test_command_says_it_takes_minutes():
    """Issue 25: the README's test command gave no hint that it takes minutes; the README says so, and the suite's
    first line says so."""
    test_line = README[:README.index('pip install -e ".[test,torch]"')]
    assert "takes minutes" in test_line[test_line.rindex("Install and run the tests"):]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/test_docs.py"],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300)
    assert done.stdout.startswith("simcomm: the whole suite takes about five minutes"), done.stdout[:300]
