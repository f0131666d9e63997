"""Malformed scenarios never give a traceback: mutate the shipped files and check every failure is a
ScenarioError naming the file, a line and a key path (the mutated one, when the schema rejects the value).

Mutations: bad values, deleted, renamed and added keys, damaged text, YAML aliases and anchors at any key path
(another node of the file, a node that contains itself, an alias bomb), and huge, tiny and fractional numbers
at every numeric key (numbers, and sizes, rates and times with units). Each case runs under a watchdog: a
hang is a failure.

A mutated scenario that passes validation is also run (`simcomm run` without writing files; see `runnable` for
the few that are not): it must end with finite numbers and a report, or with a SimcommError that is not a rank's
raw exception (a value that validation lets through must not hang, give nan or a traceback at run time).

A few hundred cases run in CI; `pytest -m fuzz tests/scenario` runs 10,000.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from adversarial import bounded
from simcomm import RankFailed, SimcommError
from simcomm.report.json_out import result_json
from simcomm.report.table import render
from simcomm.scenario import ScenarioError, load_text
from simcomm.scenario.loader import dotted
from simcomm.scenario.schema import Scenario
from simcomm.workloads import report_blocks, run_scenario, summarize

ROOT = Path(__file__).resolve().parents[2]
TEXTS = {p.name: p.read_text() for p in sorted((ROOT / "scenarios").glob("*.yaml"))}
DATA = {name: yaml.safe_load(text) for name, text in TEXTS.items()}

BAD_VALUES = st.sampled_from([
    None, True, 0, -1, -(10 ** 12), 10 ** 30, 1.5, float("nan"), float("inf"), "", "x", "12 parsecs", "400G",
    "8Mb", "-1GiB", "1e400B", "1.5B", "nosuch-preset", "hgx-h1000", "rnig", "LL256", "0-", "a:b:c", "2ms/s",
    [], [1, "a"], {}, {"bogus": 1}, "\u00b5", "9" * 40, [[[]]], "allreduce", "Simple", "bfloat16", "-5us",
])


HUGE_AND_FRACTIONAL = st.sampled_from([
    1e308, 1e-308, 5e-324, 2 ** 63, 2 ** 64, 10 ** 100, -(2 ** 63), 0.5, 1.0000001, 1e-9, -0.0, 7.5, 3.999999999,
    float("inf"), -1e308])
UNIT_NUMBERS = st.sampled_from(["1e300", "1e-300", "0.5", "1.0000001", "99999999999999999999", "1e18", "0.0001"])
CASE_LIMIT_S = 30.0
RUN_MAX_RANKS = 64
# The shipped programs' own arguments, as the files give them.
PROGRAM_ARGS = {d["workload"]["program"]: d["workload"].get("args", []) for d in DATA.values()
                if d["workload"].get("kind") == "program"}
CHECKED_PROGRAMS = {"simcomm.workloads.programs:allreduce_check"}  # programs that check their own arguments
RUN: dict = {"run": 0, "skipped": 0}


def paths(obj, prefix=()):
    """Every key path in a nested structure (mappings and lists)."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, prefix + (i,))
    return out


def _set(data, path, fn):
    here = data
    for p in path[:-1]:
        here = here[p]
    fn(here, path[-1])


@st.composite
def mutations(draw):
    """(kind, mutated path, YAML text)."""
    name = draw(st.sampled_from(sorted(TEXTS)))
    kind = draw(st.sampled_from(["value", "value", "value", "delete", "rename", "add", "text", "alias", "alias",
                                 "number", "number"]))
    if kind == "text":  # damage the text itself: truncate, or splice in something YAML cannot read
        text = TEXTS[name]
        cut = draw(st.integers(0, len(text)))
        junk = draw(st.sampled_from(["", ":", "\t", "- [", "{", "'", "key: value: other", "!!python/object:os.system",
                                     "&a [*a]", "? [a, b]\n: 1", "\n  bad indent: 1", "%YAML 9.9", "\x00"]))
        return kind, (), text[:cut] + junk + text[cut:]
    data = yaml.safe_load(TEXTS[name])
    path = draw(st.sampled_from(paths(data)))
    if kind == "alias":  # a shared object is written as an anchor and aliases
        _set(data, path, lambda d, k: d.__setitem__(k, draw(_aliased(data, path))))
        return kind, path, yaml.safe_dump(data, allow_unicode=True)
    if kind == "number":
        numeric = [p for p in paths(data) if _numeric(_get(data, p))]
        if not numeric:
            return kind, (), yaml.safe_dump(data)
        path = draw(st.sampled_from(numeric))
        old = _get(data, path)
        if isinstance(old, str):  # a size, rate or time: keep the unit, change the number
            unit = old.lstrip("0123456789.eE+- ")
            value = draw(UNIT_NUMBERS) + unit
        else:
            value = draw(HUGE_AND_FRACTIONAL)
        _set(data, path, lambda d, k: d.__setitem__(k, value))
        return kind, path, yaml.safe_dump(data, allow_unicode=True)
    if kind == "value":
        value = draw(BAD_VALUES)
        _set(data, path, lambda d, k: d.__setitem__(k, value))
    elif kind == "delete":
        _set(data, path, lambda d, k: d.pop(k))
    elif kind == "rename":
        if not isinstance(path[-1], str):
            return kind, path, yaml.safe_dump(data)
        new = draw(st.sampled_from([path[-1] + "s", path[-1][:-1], path[-1].upper(), "x" + path[-1]]))

        def rename(d, k):
            d[new] = d.pop(k)
        _set(data, path, rename)
        path = path[:-1] + (new,)
    else:
        key = draw(st.sampled_from(["colour", "nodez", "extra", "sizes", "kind", "preset", "1"]))
        target = data
        for p in path:
            if isinstance(target, dict) and p in target and isinstance(target[p], dict):
                target = target[p]
        if key in target:
            return kind, path, yaml.safe_dump(data)
        target[key] = draw(BAD_VALUES)
        path = path[:max(0, len(path) - 1)]
    return kind, path, yaml.safe_dump(data, allow_unicode=True)


def _get(data, path):
    for p in path:
        data = data[p]
    return data


def _numeric(value) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float)) or (isinstance(value, str) and value[:1].isdigit())


@st.composite
def _aliased(draw, data, path):
    """A value for `path` that YAML writes with an anchor and aliases."""
    how = draw(st.sampled_from(["other", "other", "self", "bomb", "twice"]))
    if how == "self":  # the container of path, inside itself: a cycle
        return _get(data, path[:-1]) if len(path) > 1 else data
    if how == "bomb":
        level = [draw(st.sampled_from([1, "1MiB", "x", 2.5]))] * 9
        for _ in range(draw(st.integers(1, 9))):
            level = [level] * 9
        return level
    nodes = [p for p in paths(data) if isinstance(_get(data, p), (dict, list))]
    other = _get(data, draw(st.sampled_from(nodes))) if nodes else {"a": 1}
    return [other, other] if how == "twice" else other


def _related(a: str, b: str) -> bool:
    return a.startswith(b) or b.startswith(a)


def check(case) -> None:
    """The case fails cleanly, within CASE_LIMIT_S (a watchdog thread turns a hang into a failure)."""
    bounded(lambda: _check(case), CASE_LIMIT_S, f"a mutated scenario: {case[0]} at {case[1]}")


def runnable(loaded) -> bool:
    """Whether a valid mutated scenario is run too. Not run: clusters of more than RUN_MAX_RANKS ranks (a rank
    program runs a thread per rank, and a step model of 1,000+ GPUs takes seconds: too slow for a sample run in
    every case), and programs other than CHECKED_PROGRAMS given other arguments than the shipped ones (their
    arguments are the program's own, unchecked as in any torch script; a bad one fails in the rank, as it would
    on torch)."""
    w = loaded.scenario.workload
    if loaded.cluster.num_ranks > RUN_MAX_RANKS:
        return False
    return w.kind != "program" or w.program in CHECKED_PROGRAMS or w.args == PROGRAM_ARGS.get(w.program)


def _finite(value, where: str) -> None:
    """Every number in a result (nested in rows, mappings and lists) is finite."""
    if isinstance(value, dict):
        for k, v in value.items():
            _finite(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _finite(v, f"{where}[{i}]")
    elif isinstance(value, float):
        assert math.isfinite(value), f"{where} is {value!r}"


def _run(loaded, case) -> None:
    """Run a valid scenario: finite numbers and a report, or a clean SimcommError with a bounded message."""
    RUN["run"] += 1
    try:
        result = run_scenario(loaded)
    except SimcommError as exc:
        assert not isinstance(exc, RankFailed), f"a rank raised {exc!r} ({case[0]} at {dotted(case[1])})"
        text = str(exc)
        assert text and "Traceback" not in text and not re.search(r"\d{41}", text), text[:500]
        return
    assert math.isfinite(result.elapsed) and result.elapsed >= 0, result.elapsed
    rows = [{k: v for k, v in r.items() if k != "result"} for r in result.row_dicts()]  # a program's own value
    _finite(rows, "rows")
    _finite(summarize(result), "summary")
    assert render(report_blocks(result), rich=False) and result_json(result)["rows"]


def _check(case) -> None:
    kind, path, text = case
    try:
        loaded = load_text(text, "mut.yaml")
    except ScenarioError as exc:
        assert exc.problems
        for p in exc.problems:
            assert p.file == "mut.yaml" and isinstance(p.line, int) and p.line >= 1, p
            assert p.path or p.message.startswith(("invalid YAML", "expected a mapping", "the file is empty",
                                                   "expected UTF-8", "missing required key")), p
            assert "Traceback" not in p.message and p.message
        if kind in ("value", "delete", "rename", "number") and path:
            try:
                Scenario.model_validate(yaml.safe_load(text))
            except (ValidationError, yaml.YAMLError, RecursionError):
                # The schema rejects the file, so a problem must be about the mutated key (or its parent).
                assert any(_related(p.path, dotted(path)) for p in exc.problems), (dotted(path), str(exc))
        return
    if runnable(loaded):
        _run(loaded, case)
    else:
        RUN["skipped"] += 1


COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@settings(max_examples=300, **COMMON)
@given(mutations())
def test_mutated_scenarios_fail_cleanly(case):
    check(case)


def test_the_sample_runs_valid_mutated_scenarios():
    """The run laws hold vacuously if no mutated scenario is valid: the CI sample must run some."""
    if RUN["run"] == 0:  # run alone (-k), the sample is not there
        test_mutated_scenarios_fail_cleanly()
    print(f"\nmutated scenarios run: {RUN['run']}, valid but not run: {RUN['skipped']}")
    assert RUN["run"] >= 20


@pytest.mark.parametrize("args, message", [
    ("[7.5, 2]", "rank 0: allreduce_check: elements must be a whole number from 1 to 16777216, got 7.5"),
    ("[1024, 9223372036854775808]",
     "rank 0: allreduce_check: rounds must be a whole number from 0 to 1000, got 9223372036854775808"),
    ("[16777216, 1000]",
     "rank 0: allreduce_check: 16777216 elements x 1000 rounds is more than 2\\*\\*26 elements reduced per rank"),
    ("[1, 100000000000000000000000000000000000000000]",
     "rank 0: allreduce_check: rounds must be a whole number from 0 to 1000, got a 137-bit whole number"),
    ("['1MiB', true]", "rank 0: allreduce_check: rounds must be a whole number from 0 to 1000, got True"),
    ("[1, 1, [1], [1]]", "workload.args: simcomm.workloads.programs:allreduce_check\\(rank, elements=1048576, "
                         "rounds=2\\) is called as function\\(rank, \\*args\\) with 4 arguments after the rank: too "
                         "many positional arguments")])
def test_the_shipped_program_checks_its_arguments(args, message):
    """cpu-host.yaml's program with arguments mutations gave: a clean error at once (7.5 or an alias that made
    10 arguments was a TypeError in every rank; 2**63 rounds ran on for good)."""
    loaded = load_text(TEXTS["cpu-host.yaml"].replace("[262144, 2]", args), "cpu-host.yaml")
    assert runnable(loaded)
    with pytest.raises(SimcommError, match=message) as info:
        run_scenario(loaded)
    assert not isinstance(info.value, RankFailed)


FUZZ_CASES: list = []


@settings(max_examples=10_000, **COMMON)
@given(mutations())
def _fuzz(case):
    FUZZ_CASES.append(case[0])
    check(case)


@pytest.mark.fuzz
def test_fuzz_mutated_scenarios():
    """10,000 cases; deselected by default (pyproject's addopts), run with `pytest -m fuzz`."""
    _fuzz()
    from collections import Counter
    print(f"\nfuzz: {len(FUZZ_CASES)} mutated scenarios, by kind {dict(Counter(FUZZ_CASES))}; run: {RUN['run']}, "
          f"valid but not run: {RUN['skipped']}")
    assert len(FUZZ_CASES) >= 10_000
