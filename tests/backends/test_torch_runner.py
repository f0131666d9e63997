"""The torch adapter itself: failures come back with the rank, time limits hold, processes never linger."""
import math
import multiprocessing
import sys
import time

import numpy as np
import pytest
import torch

from simcomm.backends import (
    TORCH_HINT,
    RealRankFailed,
    RealRunTimeout,
    bitwise_equal,
    diff,
    require_torch,
    run_real,
)
from simcomm.errors import SimcommError


def _no_rank_processes_left():
    return not [p for p in multiprocessing.active_children() if p.name.startswith("simcomm-real-rank")]


def one_rank_raises(rank, dist):
    if rank == 1:
        raise ValueError("boom on rank 1")
    t = torch.zeros(3)
    dist.recv(t, src=1)  # would wait forever: the run must stop as soon as rank 1 fails
    return t


def one_rank_hangs(rank, dist):
    if rank == 0:
        time.sleep(600)
    return rank


def test_a_failing_rank_stops_the_run_with_its_traceback():
    t0 = time.monotonic()
    with pytest.raises(RealRankFailed) as info:
        run_real(one_rank_raises, nprocs=2, timeout=120)
    assert info.value.rank == 1
    assert "boom on rank 1" in str(info.value) and "ValueError" in info.value.details
    assert time.monotonic() - t0 < 60
    assert _no_rank_processes_left()


def test_timeout_terminates_every_process():
    t0 = time.monotonic()
    with pytest.raises(RealRunTimeout, match=r"within 6 s: ranks? 0(, 1)? still running"):
        run_real(one_rank_hangs, nprocs=2, timeout=6)
    assert time.monotonic() - t0 < 30
    assert _no_rank_processes_left()


def test_clear_error_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    with pytest.raises(ImportError, match=r"pip install simcomm\[torch\]"):
        require_torch()
    with pytest.raises(ImportError) as info:
        run_real(one_rank_hangs, nprocs=2)
    assert str(info.value) == TORCH_HINT


def test_program_must_be_picklable():
    with pytest.raises(SimcommError, match="picklable"):
        run_real(lambda rank, dist: rank, nprocs=2)
    assert _no_rank_processes_left()


def test_diff_is_bitwise_with_max_abs_diff():
    a = torch.tensor([0.0, 1.0, float("nan")])
    assert bitwise_equal(a, a.clone())
    eq, md, why = diff(a, torch.tensor([-0.0, 1.0, float("nan")]))
    assert not eq and md == 0.0 and "1 of 3 elements differ" in why[0]
    eq, md, _ = diff({"x": [a, 2]}, {"x": [torch.tensor([0.0, 1.5, float("nan")]), 2]})
    assert not eq and md == 0.5
    eq, md, _ = diff(torch.tensor([1.0]), torch.tensor([float("nan")]))
    assert not eq and md == math.inf
    assert not diff(torch.zeros(2), torch.zeros(3))[0]
    assert not diff(torch.zeros(2), np.zeros(2, np.float32))[0]
    assert not diff(torch.zeros(2), torch.zeros(2, dtype=torch.float64))[0]
    assert diff(None, None)[0] and diff(1.5, 1.5)[0] and not diff(0.0, -0.0)[0]
    assert bitwise_equal(torch.tensor([1.5], dtype=torch.bfloat16), torch.tensor([1.5], dtype=torch.bfloat16))
    assert bitwise_equal(torch.tensor([True, False]), torch.tensor([True, False]))
