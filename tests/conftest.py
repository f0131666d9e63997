"""Shared fixtures: golden outputs that catch silent drift in simulated numbers.

Golden files live in tests/golden/*.json. Regenerate them only when a change of numbers is the point:
    SIMCOMM_GOLDEN=regen python -m pytest -p no:xdist tests/test_golden.py tests/distributed
and say in the commit which numbers changed and why.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"
REGEN = os.environ.get("SIMCOMM_GOLDEN") == "regen"
REL = 1e-12  # floats may differ in the last bits across CPUs (SIMD summation order), nothing more
# An array's "last bits" are its own dtype's: float32 maths (torch, numpy SIMD kernels) differs by an ulp or two
# between CPUs (AVX2 vs AVX-512 summation order), so such arrays compare within a few of their own ulps.
DTYPE_REL = {"float32": 4 * 2.0 ** -23, "float16": 4 * 2.0 ** -10, "bfloat16": 4 * 2.0 ** -7}


def canonical(value):
    """A JSON-ready form of a result: arrays and tensors become {dtype, shape, values}; tuples become lists."""
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if type(value).__module__.startswith("torch") and hasattr(value, "numpy"):
        value = value.detach().float().numpy() if "bfloat16" in str(value.dtype) else value.detach().numpy()
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.name, "shape": list(value.shape), "values": canonical(value.tolist())}
    if isinstance(value, np.generic):
        return canonical(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _differences(expected, actual, path="", rel=REL) -> list[str]:
    if isinstance(expected, float) or isinstance(actual, float):
        if isinstance(expected, (int, float)) and isinstance(actual, (int, float)) and \
                not isinstance(expected, bool) and not isinstance(actual, bool):
            if math.isclose(expected, actual, rel_tol=rel, abs_tol=1e-300):
                return []
        return [f"{path or '.'}: expected {expected!r}, got {actual!r}"]
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{path}.{k}: missing" for k in expected if k not in actual]
        out += [f"{path}.{k}: unexpected" for k in actual if k not in expected]
        if expected.get("dtype") == actual.get("dtype") and set(expected) == {"dtype", "shape", "values"}:
            rel = max(rel, DTYPE_REL.get(expected["dtype"], rel))
        for k in expected:
            if k in actual:
                out += _differences(expected[k], actual[k], f"{path}.{k}", rel)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: expected {len(expected)} items, got {len(actual)}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out += _differences(e, a, f"{path}[{i}]", rel)
        return out
    return [] if expected == actual else [f"{path or '.'}: expected {expected!r}, got {actual!r}"]


class GoldenBook:
    """One golden file: check(key, value) compares with the recorded value (or records it when regenerating)."""

    def __init__(self, name: str):
        self.path = GOLDEN_DIR / f"{name}.json"
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {}

    def check(self, key: str, value) -> None:
        value = canonical(value)
        if REGEN:
            self.data[key] = value
            return
        if key not in self.data:
            pytest.fail(f"no golden value for {key!r} in {self.path.name}; regenerate (see tests/conftest.py)")
        diffs = _differences(self.data[key], value)
        if diffs:
            shown = "\n  ".join(diffs[:20])
            pytest.fail(f"{key} drifted from {self.path.name} ({len(diffs)} differences):\n  {shown}")

    def save(self) -> None:
        if REGEN:
            GOLDEN_DIR.mkdir(exist_ok=True)
            ordered = {k: self.data[k] for k in sorted(self.data)}
            self.path.write_text(json.dumps(ordered, indent=1, sort_keys=True) + "\n")


_BOOKS: dict[str, GoldenBook] = {}


def golden_book(name: str) -> GoldenBook:
    if name not in _BOOKS:
        _BOOKS[name] = GoldenBook(name)
    return _BOOKS[name]


def pytest_sessionstart(session):
    """Say up front that the whole suite takes minutes (the README's test command prints this first)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(session.config, "workerinput"):  # once, not per xdist worker
        reporter.write_line("simcomm: the whole suite takes about five minutes on 2 cores (more on a busy machine)")


def pytest_sessionfinish(session, exitstatus):
    for book in _BOOKS.values():
        book.save()


@pytest.fixture
def golden():
    return golden_book


class FakeRay:
    """A stand-in for the ray module (not installed in CI; an optional extra): remote tasks run in a pool of real
    worker processes, so work that keeps per-process state meets fresh processes as on a Ray cluster."""

    def __init__(self, workers: int = 2):
        from concurrent.futures import ProcessPoolExecutor
        self.pool = ProcessPoolExecutor(workers)
        self.inits: list[dict] = []
        self.tasks = 0

    def init(self, **kw):
        self.inits.append(kw)

    def cluster_resources(self):
        return {"CPU": float(self.pool._max_workers)}

    def put(self, value):
        return value

    def remote(self, fn):
        fake = self

        class Remote:
            @staticmethod
            def remote(*args):
                fake.tasks += 1
                return fake.pool.submit(fn, *args)
        return Remote

    def wait(self, pending, num_returns=1):
        return pending[:num_returns], pending[num_returns:]

    def get(self, refs):
        return [r.result() for r in refs] if isinstance(refs, list) else refs.result()


@pytest.fixture
def fake_ray(monkeypatch):
    """`import ray` gives a FakeRay for the test's duration."""
    import sys
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    yield fake
    fake.pool.shutdown()
