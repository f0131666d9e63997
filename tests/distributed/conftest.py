"""Every seed example's results, finish times and elapsed simulated time are golden (see tests/conftest.py)."""
import pytest

import simcomm
from conftest import golden_book


@pytest.fixture(autouse=True)
def _golden_seed_runs(request, monkeypatch):
    module = request.module.__name__.rsplit(".", 1)[-1]
    if not module.startswith("test_seeds_"):
        yield
        return
    book = golden_book("seeds")
    real = simcomm.spawn
    calls = []

    def recording_spawn(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append({"results": result.results, "elapsed": result.elapsed, "finish": result.finish_times})
        return result

    monkeypatch.setattr(simcomm, "spawn", recording_spawn)
    yield
    for i, call in enumerate(calls):
        book.check(f"{module}::{request.node.name}#{i}", call)
