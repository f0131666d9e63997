"""workers.RayPool: a process pool's map on Ray, in order, each worker process set up once."""
import os

from simcomm.workers import RayPool

_SETUPS: list = []


def _setup(tag):
    _SETUPS.append((os.getpid(), tag))


def _work(x):
    return x * x, os.getpid(), list(_SETUPS)


def test_map_keeps_the_order_and_sets_each_process_up_once(fake_ray):
    pool = RayPool("", "a test", _setup, ("a",))
    out = list(pool.map(_work, range(40), chunksize=3))
    assert [v for v, _pid, _setups in out] == [x * x for x in range(40)]
    for _v, pid, setups in out:
        assert [s for s in setups if s[0] == pid] == [(pid, "a")]  # its own set-up, once, before any work
    assert fake_ray.tasks == 14 and fake_ray.inits[0]["address"] is None
    again = RayPool("", "a test", _setup, ("b",))  # a new pool sets every process up afresh
    assert all(setups[-1] == (pid, "b") for _v, pid, setups in again.map(_work, range(6), chunksize=1))
