"""Adversarial `simcomm launch` scripts (issue 21): hypothesis writes torchrun scripts from what a script may do
besides the collectives (sleeps and clock reads, a lock of a module the ranks share held across a sleep or a
collective, a subprocess, threading and asyncio waits, a helper thread, its own os.environ, torch.multiprocessing
children that raise or exit), mixed with collectives, on some ranks or all, with an optional fault (a rank raises,
exits with a status, or ends early).

Laws (tests/adversarial.py): every launch ends within a watchdog's time with exit 0, or 1 and one error naming a
rank, never a traceback through simcomm; a script with no fault and no lock held across a collective ends with 0;
the simulated times are finite and not negative; the same script prints the same bytes (stdout and stderr) and the
same simulated times on every run.

CI runs 40 scripts, the same ones every run; `pytest -m fuzz tests/backends/launch/test_adversarial.py` runs 2,000
new ones.
"""
from __future__ import annotations

import json
import sys
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adversarial import clean, cli, figures

SHARED = """import threading
LOCK = threading.Lock()
RLOCK = threading.RLock()
COUNT = [0]
"""
HEAD = """import asyncio, os, subprocess, sys, threading, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import fuzz_shared as shared


def child(i, how):
    if how == "raise" and i == 1:
        raise ValueError("child gives up")
    if how == "exit" and i == 1:
        sys.exit(4)
    time.sleep(0.001 * (i + 1))


dist.init_process_group("gloo")
rank = dist.get_rank()
t0 = time.monotonic()
"""
STEPS = {
    "sleep": "time.sleep({x})",
    "rank_sleep": "time.sleep({x} * (rank + 1))",
    "clock": 'print(f"rank {{rank}} t {{time.perf_counter() - t0:.9f}} {{time.time() - time.time():.1f}}")',
    "all_reduce": 't = torch.ones(3) * (rank + 1)\ndist.all_reduce(t)\nprint(f"rank {{rank}} sum {{t.tolist()}}")',
    "barrier": "dist.barrier()",
    "lock_sleep": "with shared.LOCK:\n    time.sleep({x})",
    "rlock": "with shared.RLOCK, shared.RLOCK:\n    shared.COUNT[0] += 1\n    time.sleep({x})",
    "lock_collective": "with shared.LOCK:\n    dist.barrier()",
    "subprocess": 'subprocess.run(["true"], check=True, timeout=60)',
    "event_wait": "assert not threading.Event().wait(0.001)",
    "asyncio": "asyncio.run(asyncio.sleep(0.001))",
    "environ": 'os.environ["FUZZ_VALUE"] = str(rank)\nassert os.environ["FUZZ_VALUE"] == str(rank)',
    "thread": "th = threading.Thread(target=lambda: sum(range(1000)))\nth.start()\nth.join()",
    "spawn": ('try:\n    mp.spawn(child, args=("{how}",), nprocs=2)\n'
              'except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:\n'
              '    print(f"rank {{rank}} child failed: {{type(exc).__name__}}")'),
}
FAULTS = {"raise": 'raise ValueError("fault")', "exit": "sys.exit(3)", "end": "sys.exit(0)"}
OUTCOMES: Counter = Counter()


@st.composite
def scripts(draw):
    n = draw(st.sampled_from([1, 2, 3]))
    steps = draw(st.lists(st.fixed_dictionaries({
        "kind": st.sampled_from(sorted(STEPS)), "x": st.sampled_from([0, 1e-9, 0.001, 0.5]),
        "how": st.sampled_from(["ok", "raise", "exit"]),
        "only": st.one_of(st.none(), st.none(), st.integers(0, n - 1))}), min_size=1, max_size=6))
    fault = draw(st.one_of(st.none(), st.none(), st.fixed_dictionaries({
        "kind": st.sampled_from(sorted(FAULTS)), "rank": st.integers(0, n - 1),
        "at": st.integers(0, len(steps))})))
    return {"n": n, "cluster": draw(st.sampled_from(["cpu-host", "hgx-h100"])), "steps": steps, "fault": fault}


def render(prog: dict) -> str:
    lines = [HEAD]
    for i, s in enumerate(prog["steps"] + [None]):
        f = prog["fault"]
        if f and f["at"] == i:
            lines.append(f"if rank == {f['rank']}:\n    {FAULTS[f['kind']]}")
        if s is None:
            break
        code = STEPS[s["kind"]].format(x=s["x"], how=s["how"])
        if s["only"] is not None:
            code = f"if rank == {s['only']}:\n" + "\n".join("    " + c for c in code.splitlines())
        lines.append(code)
    lines.append('print(f"rank {rank} end {time.monotonic() - t0:.9f}")')
    return "\n".join(lines) + "\n"


COLLECTIVE_STEPS = {"all_reduce", "barrier", "lock_collective"}


def must_succeed(prog: dict) -> bool:
    """No fault (a failing rank, or one that ends early while the others wait for it), no collective that only some
    ranks call, and no lock held across a collective that another rank needs it to reach."""
    steps = prog["steps"]
    if prog["fault"] or prog["n"] == 1:
        return prog["fault"] is None
    return not any(s["kind"] == "lock_collective" or (s["kind"] in COLLECTIVE_STEPS and s["only"] is not None)
                   for s in steps)


def run_script(prog: dict, tmp_path) -> str:
    (tmp_path / "fuzz_shared.py").write_text(SHARED)
    script = tmp_path / "fuzz_script.py"
    script.write_text(render(prog))
    summary = tmp_path / "summary.json"
    argv = ["launch", "--nproc-per-node", str(prog["n"]), "--cluster", prog["cluster"], "--summary", str(summary),
            str(script)]
    runs = []
    for _ in range(2):
        sys.modules.pop("fuzz_shared", None)  # imported afresh by each launch: its locks are made in the launch
        summary.unlink(missing_ok=True)
        code, out, err = cli(argv, 120)
        runs.append((code, out, err, summary.read_text() if summary.exists() else None))
    sys.modules.pop("fuzz_shared", None)
    code, out, err, doc = runs[0]
    what = render(prog)
    assert runs[1] == runs[0], f"the same script printed other output:\n{what}"
    clean(code, err, what, codes=(0, 1))
    if code:
        assert "rank " in err.split("simcomm: error:", 1)[1], f"the error names no rank: {err}\n{what}"
    if must_succeed(prog):
        assert code == 0, f"a script with no fault failed: {err[-2000:]}\n{what}"
    if doc is not None:
        figures([w["elapsed"] for w in json.loads(doc)["worlds"] if w["elapsed"] is not None], "elapsed")
        figures([w["finish_times"] for w in json.loads(doc)["worlds"]], "finish times")
    return "ok" if code == 0 else "failed"


COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck))


@settings(max_examples=40, derandomize=True, **COMMON)
@given(scripts())
def test_launched_scripts_end_cleanly_and_the_same_every_time(tmp_path_factory, prog):
    OUTCOMES[run_script(prog, tmp_path_factory.mktemp("launch"))] += 1


def test_the_sample_runs_and_fails_scripts(tmp_path_factory):
    """The laws hold vacuously if every script fails: the CI sample must run some to the end and fail some."""
    if sum(OUTCOMES.values()) < 40:  # run alone (-k)
        test_launched_scripts_end_cleanly_and_the_same_every_time(tmp_path_factory)
    print(f"\nlaunched scripts: {dict(OUTCOMES)}")
    assert OUTCOMES["ok"] >= 5 and OUTCOMES["failed"] >= 2


FUZZ: Counter = Counter()


@settings(max_examples=2_000, derandomize=False, database=None, **COMMON)
@given(scripts())
def _fuzz(tmp_path_factory, prog):
    FUZZ[run_script(prog, tmp_path_factory.mktemp("launch"))] += 1


@pytest.mark.fuzz
def test_fuzz_launched_scripts(tmp_path_factory):
    """2,000 new scripts each run; deselected by default, run with `pytest -m fuzz`."""
    _fuzz(tmp_path_factory)
    print(f"\nlaunched scripts: {dict(FUZZ)}")
    assert sum(FUZZ.values()) >= 2_000
