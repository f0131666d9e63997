"""The compute queue with SMs shared with communication (engine/compute.py): re-rated when communication starts
or ends, in queue order, deterministic, one event per job plus one per moved end."""
import numpy as np
import pytest

from simcomm.engine import IDLE_KERNEL, MEMORY_KERNEL, SPREAD_MIX, Mix, Simulation
from simcomm.engine.sharing import COMM_CTA_HBM, SPREAD_KERNEL
from simcomm.hardware import build_cluster

CLUSTER = build_cluster("hgx-h100")  # 132 SMs


def sim(interference=True, cluster=CLUSTER) -> Simulation:
    return Simulation(cluster, "steps", interference=interference)


def queue(s: Simulation, ranks, seconds, mix=SPREAD_MIX):
    got = {}
    s.compute.run(np.asarray(ranks, dtype=np.int64), seconds, lambda ends: got.setdefault("ends", ends.copy()),
                  mix)
    return got


def at(s: Simulation, when: float, fn):
    s.env.timeout(when - s.env.now).callbacks.append(lambda _e: fn())


def test_work_slows_from_the_moment_sms_are_taken_and_recovers_when_released():
    s = sim()
    got = queue(s, [0], 1e-3)
    release = []
    at(s, 0.5e-3, lambda: release.append(s.compute.occupy([0], 32)))
    at(s, 0.9e-3, lambda: release[0]())
    s.env.run()
    done = 0.5e-3 + 0.4e-3 * 100 / 132  # work done by 0.9 ms: half alone, then at 100/132 of the rate
    assert got["ends"][0] == pytest.approx(0.9e-3 + (1e-3 - done))
    assert s.compute.stats["rerated_jobs"] == 2


def test_queued_work_moves_with_the_work_before_it():
    s = sim()
    first, second = queue(s, [0, 1], 1e-3), queue(s, [0, 1], 2e-3)
    at(s, 0.5e-3, lambda: s.compute.occupy([0], 32))  # rank 0 only, never released
    s.env.run()
    stretch = 132 / 100
    assert first["ends"].tolist() == pytest.approx([0.5e-3 + 0.5e-3 * stretch, 1e-3])
    assert second["ends"].tolist() == pytest.approx([first["ends"][0] + 2e-3 * stretch, 3e-3])


def test_without_sharing_the_queue_is_a_plain_fifo():
    for s in (sim(False), Simulation(build_cluster("cpu-host"), "steps")):
        got = queue(s, [0], 1e-3)
        at(s, 0.5e-3, lambda s=s: s.compute.occupy([0], 32))
        s.env.run()
        assert got["ends"][0] == 1e-3 and s.compute.occupy([0], 32) is None


def test_nothing_held_means_the_exact_time_alone():
    s = sim()
    got = queue(s, [3, 5], 0.1 + 0.2)
    s.env.run()
    assert got["ends"].tolist() == [0.1 + 0.2] * 2


def test_idle_parts_of_a_mix_do_not_slow():
    mix = Mix([1.0, 1.0, 2.0], [SPREAD_KERNEL, IDLE_KERNEL, MEMORY_KERNEL])
    s = sim()
    got = queue(s, [0], 4e-3, mix)
    s.compute.occupy([0], 24)
    s.env.run()
    memory = 1 / (1 - 24 * COMM_CTA_HBM / CLUSTER.device.memory_bandwidth)
    assert got["ends"][0] == pytest.approx(1e-3 * 132 / 108 + 1e-3 + 2e-3 * memory)


def test_a_rank_listed_twice_holds_twice_and_per_rank_amounts_split_into_jobs():
    s = sim()
    got = queue(s, [0, 1], [1e-3, 2e-3])
    s.compute.occupy([0, 0, 1], 16)
    s.env.run()
    assert s.compute.held[:2].tolist() == [32, 16]
    assert got["ends"].tolist() == pytest.approx([1e-3 * 132 / 100, 2e-3 * 132 / 116])


def test_events_stay_few_and_runs_are_deterministic():
    cluster = build_cluster("hgx-h100", nodes=8)

    def run():
        s = sim(cluster=cluster)
        ends = [queue(s, [r], 1e-3 * (1 + r % 3)) for r in range(64)]
        for t in range(10):
            at(s, 1e-4 * (t + 1), lambda t=t: s.compute.occupy(np.arange(t, 64, 10), 8))
        s.env.run()
        return [e["ends"].tolist() for e in ends], s.stats()
    a, b = run(), run()
    assert a == b
    stats = a[1]
    assert stats["events"] <= 10 + 64 + stats["rerated_jobs"] + 1
