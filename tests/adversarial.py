"""The laws every adversarial suite checks, in one place (issue 21): no hang, no raw traceback, no negative or
non-finite figure, the same output on every run.

The suites, each a short CI profile (derandomized) and a long one for `pytest -m fuzz`:
- rank programs: distributed/test_adversarial.py
- scenario files: scenario/test_mutations.py
- Session call sequences: test_session_adversarial.py
- nccl-tests logs for compare and calibrate: backends/test_log_adversarial.py
- `simcomm launch` scripts: backends/launch/test_adversarial.py
Training configurations are the next surface (they come with the parallel refactor): draw them with a hypothesis
strategy, run each through `cli(["validate", ...])` and `cli(["run", ...])` (and `plan`), and check `clean` and
`figures` on what comes back, as the suites above do.
"""
from __future__ import annotations

import contextlib
import io
import math
import re
import threading
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src" / "simcomm")


def bounded(fn, limit_s: float, what):
    """fn() in a thread that must end within limit_s seconds (no hang); returns its value or raises its error."""
    box: dict = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"did not end within {limit_s} s: {what}"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def cli(argv: list[str], limit_s: float = 120.0) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `simcomm ARGV` run in this process, within limit_s."""
    from simcomm.cli import main
    out, err = io.StringIO(), io.StringIO()

    def run():
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return main(list(argv))
    code = bounded(run, limit_s, f"simcomm {' '.join(argv)}")
    return code, out.getvalue(), err.getvalue()


def clean(code: int, err: str, what, codes=(0, 1, 2)) -> None:
    """A clean end: an expected exit code, and no traceback through simcomm's own code on stderr after its error
    line (a user's own traceback, printed as Python would, may precede it)."""
    assert code in codes, f"exit code {code} for {what}: {err[-2000:]}"
    tail = err[err.find("simcomm: error:"):] if "simcomm: error:" in err else err
    assert not re.search(rf'File "{re.escape(SRC)}', tail), f"a traceback through simcomm for {what}:\n{err[-3000:]}"
    if code:
        assert "simcomm: error:" in err or "error:" in err, f"exit {code} with no error message for {what}: {err}"


def figures(value, where: str = "", signed: tuple[str, ...] = ()) -> None:
    """Every number in value (nested dicts and lists) is finite, and not negative unless its key is one of `signed`
    (a signed error)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in signed:
                _finite(v, f"{where}.{k}")
            else:
                figures(v, f"{where}.{k}", signed)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            figures(v, f"{where}[{i}]", signed)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _finite(value, where)
        assert value >= 0, f"{where} is negative: {value!r}"


def _finite(value, where: str) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        assert math.isfinite(value), f"{where} is {value!r}"
