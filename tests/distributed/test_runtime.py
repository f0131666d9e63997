"""The rank runtime never hangs: polling advances time, aborts raise at once, bad sleeps are refused (issue 13)."""
import datetime
import threading
import time

import numpy as np
import pytest

import simcomm
import simcomm.distributed as dist
from simcomm import clock

from .helpers import run


def test_polling_is_completed_lets_time_advance():
    def fn(rank):
        if rank == 0:
            clock.sleep(1e-3)
            dist.send(np.arange(4.0), dst=1)
            return None
        t = np.zeros(4)
        w = dist.irecv(t, src=0)
        polls = 0
        while not w.is_completed():
            polls += 1
        return t.tolist(), clock.time() >= 1e-3, polls > 0

    assert run(fn).results[1] == ([0.0, 1.0, 2.0, 3.0], True, True)


def test_polling_for_what_never_comes_is_a_deadlock_naming_the_poller():
    def fn(rank):
        if rank == 1:
            w = dist.irecv(np.zeros(1), src=0)
            while not w.is_completed():
                pass

    with pytest.raises(simcomm.DeadlockError, match=r"rank 1 polls is_completed\(\) on recv\(src=0\)"):
        run(fn)


def test_wait_with_a_timeout_raises_after_that_much_simulated_time():
    def fn(rank):
        if rank == 1:
            w = dist.irecv(np.zeros(1), src=0)
            with pytest.raises(simcomm.DistError, match=r"rank 1: Timed out waiting 2ms \(simulated\) for "
                                                        r"recv\(src=0\) to complete"):
                w.wait(timeout=datetime.timedelta(milliseconds=2))
            assert w.is_completed() and isinstance(w.exception(), simcomm.DistError)
            return clock.time()
        return None

    with pytest.warns(UserWarning, match=r"never matched.*rank 1: recv\(src=0"):
        assert run(fn).results[1] == pytest.approx(2e-3)


def test_a_deadlock_in_cleanup_code_names_the_error_being_handled():
    def fn(rank):
        try:
            if rank == 0:
                raise ValueError("first")
            dist.recv(np.zeros(1), src=0)
        finally:
            dist.barrier()

    with pytest.raises(simcomm.DeadlockError, match=r"rank 0 waits in barrier on WORLD .*\(while handling "
                                                    r"ValueError: first\)"):
        run(fn, nprocs=3)


def test_wait_with_a_timeout_returns_true_when_in_time():
    def fn(rank):
        w = dist.all_reduce(np.ones(2), async_op=True)
        assert w.wait(timeout=datetime.timedelta(seconds=1)) is True
        assert w.is_success() and w.exception() is None
        w.synchronize()
        fut = w.get_future()
        return fut.wait()[0].tolist(), fut.done(), fut.then(lambda f: f.value()[0].sum()).wait()

    assert run(fn).results == [([2.0, 2.0], True, 4.0)] * 2


def test_p2p_work_has_no_future_as_on_gloo():
    def fn(rank):
        w = dist.isend(np.ones(1), dst=1) if rank == 0 else dist.irecv(np.zeros(1), src=0)
        with pytest.raises(simcomm.DistError, match="Work::getFuture not implemented"):
            w.get_future()
        w.wait()
        return w.source_rank() if rank == 1 else None

    assert run(fn).results == [None, 0]


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -5, "1"])
def test_bad_sleeps_are_refused_in_the_rank(seconds):
    def fn(rank):
        if rank == 0:
            clock.sleep(seconds)
        dist.barrier()

    with pytest.raises(simcomm.DistError, match=r"rank 0: sleep\(.*\): the length must be a finite number of "
                                                "seconds >= 0"):
        run(fn)


@pytest.mark.parametrize("kwargs", [{"flops": float("nan")}, {"seconds": -5}, {"seconds": float("inf")}])
def test_bad_compute_is_refused_in_the_rank(kwargs):
    def fn(rank):
        clock.compute(**kwargs)
        dist.barrier()

    with pytest.raises(simcomm.SimcommError, match="rank 0: .*must be finite and non-negative"):
        run(fn)


def test_cleanup_calls_after_an_error_end_the_run_at_once():
    """Every rank runs `finally: dist.barrier()`; rank 3 fails. The run ends in well under a second (it took 5 s
    per stuck rank), with an error naming rank 3."""
    def fn(rank):
        try:
            if rank == 3:
                raise RuntimeError("boom")
            dist.all_reduce(np.ones(2))
        finally:
            dist.barrier()

    start = time.monotonic()
    with pytest.raises(simcomm.SimcommError, match="rank 3"):
        run(fn, nprocs=8)
    assert time.monotonic() - start < 2.0


def test_every_call_after_an_abort_raises_at_once():
    def fn(rank):
        if rank == 0:
            clock.sleep(1.0)
            raise ValueError("first")
        try:
            dist.recv(np.zeros(1), src=0)
        finally:
            for _ in range(100):
                try:
                    dist.barrier()
                except Exception:  # noqa: BLE001 - the abort is not an Exception: it cannot be swallowed
                    pass

    start = time.monotonic()
    with pytest.raises(simcomm.RankFailed, match="rank 0 raised ValueError: first"):
        run(fn, nprocs=16)
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("nprocs", ["2", 2.0, True, 0, -1, 10**6])
def test_spawn_checks_nprocs(nprocs):
    with pytest.raises(simcomm.SimcommError, match="nprocs"):
        simcomm.spawn(lambda rank: None, nprocs=nprocs)


@pytest.mark.parametrize("program, message", [
    (lambda: (clock.sleep(1e308), clock.sleep(1e308)),
     r"rank 0: sleep\(1e\+308\) starting at t=1e\+308 s would end at t=inf s; simulated time must stay finite"),
    (lambda: clock.sleep(10 ** 400), r"rank 0: sleep\(<a 1329-bit whole number>\) starting at t=0 s would end at "
                                     r"t=inf s"),
    (lambda: (clock.compute(seconds=1e308, wait=False), clock.compute(seconds=1e308)),
     r"rank 0: compute\(flops=0.0, seconds=1e\+308\) starting at t=1e\+308 s would end at t=inf s"),
    (lambda: clock.compute(flops=10 ** 400), r"rank 0: compute\(flops=<a 1329-bit whole number>, seconds=0.0\) "
                                            r"starting at t=0 s would end at t=inf s")])
def test_work_that_would_end_at_an_infinite_time_is_refused_naming_the_rank_and_call(program, message):
    """Each length is finite, the time it reaches is not (issue 13: the run ended as a 'deadlock at t=inf')."""
    def fn(rank):
        if rank == 0:
            program()
        dist.barrier()

    with pytest.raises(simcomm.DistError, match=message):
        run(fn)


def test_a_thread_the_os_refuses_ends_the_run_cleanly_and_releases_the_others(monkeypatch):
    """The OS refuses the 4th rank thread: a SimcommError saying so, no rank program ran, the 3 threads started
    are released (they used to stay blocked for good) and the thread stack size is restored."""
    real_start, started, ran = threading.Thread.start, [], []

    def start(self):
        if self.name.startswith("simcomm-rank-"):
            if len(started) == 3:
                raise RuntimeError("can't start new thread")
            started.append(self)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    stack = threading.stack_size()
    with pytest.raises(simcomm.SimcommError, match=r"could not start 8 rank threads \(3 started: can't start new "
                                                   r"thread\); simulate fewer ranks"):
        run(lambda rank: ran.append(rank), nprocs=8, execution="thread")
    assert len(started) == 3 and not any(t.is_alive() for t in started) and ran == []
    assert threading.stack_size() == stack
