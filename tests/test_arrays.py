"""arrays.in_parts: the ranges cover the work exactly once, in threads only when the work is large."""
import os
import threading
from unittest import mock

import numpy as np
import pytest

from simcomm import arrays


@pytest.mark.parametrize("n", [0, 1, 2, 7, 1000])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_parts_cover_the_range_once(n, k):
    seen = np.zeros(n, dtype=int)
    callers = []

    def work(lo, hi):
        seen[lo:hi] += 1
        callers.append(threading.current_thread() is threading.main_thread())
    with mock.patch.dict(os.environ, {"SIMCOMM_THREADS": str(k)}):
        arrays.in_parts(work, n, arrays.PARALLEL_BYTES)
    assert (seen == 1).all()
    assert sorted(callers, reverse=True) == [True] + [False] * (max(1, min(k, n)) - 1)


def test_small_work_stays_in_the_calling_thread():
    names = []
    with mock.patch.dict(os.environ, {"SIMCOMM_THREADS": "4"}):
        arrays.in_parts(lambda lo, hi: names.append((threading.current_thread().name, lo, hi)), 100,
                        arrays.PARALLEL_BYTES - 1)
    assert names == [(threading.current_thread().name, 0, 100)]


def test_an_error_in_a_helper_thread_is_raised_in_the_caller():
    def work(lo, hi):
        if lo > 0:
            raise ValueError(f"part {lo}")
    with mock.patch.dict(os.environ, {"SIMCOMM_THREADS": "2"}), pytest.raises(ValueError, match="part 5"):
        arrays.in_parts(work, 10, arrays.PARALLEL_BYTES)


def test_threads_follow_the_environment_and_the_cores():
    with mock.patch.dict(os.environ, {"SIMCOMM_THREADS": "1"}):
        assert arrays.threads() == 1
    with mock.patch.dict(os.environ, {"SIMCOMM_THREADS": ""}):
        assert 1 <= arrays.threads() <= arrays.MAX_THREADS


def test_helper_threads_keep_the_callers_numpy_error_state():
    big = np.full(8, np.finfo(np.float16).max, dtype=np.float16)
    raised = []

    def work(lo, hi):
        try:
            np.add(big[lo:hi], big[lo:hi])  # overflows: raises only under the caller's errstate
        except FloatingPointError:
            raised.append(lo)
    with mock.patch.dict(os.environ, {"SIMCOMM_THREADS": "4"}), np.errstate(over="raise"):
        arrays.in_parts(work, 8, arrays.PARALLEL_BYTES)
    assert sorted(raised) == [0, 2, 4, 6]
