"""The closed-form replay of a batch alone on the network must give the times the full solver gives."""
import numpy as np
import pytest

from simcomm.engine import Simulation
from simcomm.hardware import build_cluster


def _run(cluster, plan):
    sim = Simulation(cluster)
    out = []

    def proc():
        for delay, src, dst, nbytes in plan:
            if delay:
                yield sim.env.timeout(delay)
            out.append(sim.network.transfer(src, dst, nbytes))
        for t in out:
            yield t.done

    sim.env.run(sim.env.process(proc()))
    return [t.finish.copy() for t in out], sim


def test_replayed_batch_matches_solved_batch():
    c = build_cluster("hgx-h100", nodes=2)
    src = np.arange(16)
    dst = (src + 1) % 16
    sim = Simulation(c)
    times = []

    def proc():
        for _ in range(3):
            t = sim.network.transfer(src, dst, 8 << 20)
            start = sim.now
            yield t.done
            times.append(t.finish - start)

    sim.env.run(sim.env.process(proc()))
    assert sim.network.stats["closed_form"] == 2  # the second and third steps replayed the first
    np.testing.assert_allclose(times[1], times[0], rtol=1e-12)
    np.testing.assert_allclose(times[2], times[0], rtol=1e-12)


@pytest.mark.parametrize("join_at", [0.0, 5e-6, 30e-6, 200e-6])
def test_batch_joined_midway_matches_a_fresh_network(join_at):
    """A second transfer arriving while a replayed batch is in flight turns it back into live flows."""
    c = build_cluster("hgx-h100", nodes=2)
    src = np.arange(16)
    dst = (src + 1) % 16
    a = (0.0, src, dst, 4 << 20)
    b = (join_at, np.array([3, 11]), np.array([8, 0]), 2 << 20)
    fresh, _ = _run(c, [a, b])
    # Same traffic after a warm-up that teaches the network batch a's trajectory.
    sim = Simulation(c)
    results = []

    def proc():
        warm = sim.network.transfer(*a[1:])
        yield warm.done
        t0 = sim.now
        first = sim.network.transfer(*a[1:])
        yield sim.env.timeout(join_at)
        second = sim.network.transfer(*b[1:])
        yield first.done & second.done
        results.extend([first.finish - t0, second.finish - t0])

    sim.env.run(sim.env.process(proc()))
    assert sim.network.stats["closed_form"] >= 1
    np.testing.assert_allclose(results[0], fresh[0], rtol=1e-9)
    np.testing.assert_allclose(results[1], fresh[1], rtol=1e-9)


def test_batch_replays_beside_link_disjoint_traffic():
    """Max-min decomposes over links: a batch that shares no link with live flows still replays, with the times
    a full solve gives."""
    c = build_cluster("hgx-h100", nodes=2)
    ring = (np.arange(8), (np.arange(8) + 1) % 8, 8 << 20)  # NVLink inside node 0
    other = (np.arange(8, 16), (np.arange(8, 16) + 3) % 8 + 8, 64 << 20)  # NVLink inside node 1, much longer
    solved, _ = _run(c, [(0.0, *ring)])
    sim = Simulation(c, "steps")  # "flows" detail records link loads: replays then need an idle network
    times = []

    def proc():
        warm = sim.network.transfer(*ring)
        yield warm.done
        busy = sim.network.transfer(*other)
        t0 = sim.now
        again = sim.network.transfer(*ring)
        yield again.done
        times.append(again.finish - t0)
        yield busy.done

    sim.env.run(sim.env.process(proc()))
    assert sim.network.stats["closed_form"] == 1  # the second ring step replayed while node 1 was busy
    np.testing.assert_allclose(times[0], solved[0], rtol=1e-12)


def test_replay_sharing_a_link_is_solved_again():
    c = build_cluster("hgx-h100", nodes=2)
    ring = (np.arange(8), (np.arange(8) + 1) % 8, 8 << 20)
    cross = (np.array([0]), np.array([1]), 8 << 20)  # shares rank 0's NVLink up with the ring
    fresh, _ = _run(c, [(0.0, *ring), (2e-6, *cross)])
    sim = Simulation(c)
    out = []

    def proc():
        yield sim.network.transfer(*ring).done
        t0 = sim.now
        a = sim.network.transfer(*ring)
        yield sim.env.timeout(2e-6)
        b = sim.network.transfer(*cross)
        yield a.done & b.done
        out.extend([a.finish - t0, b.finish - t0])

    sim.env.run(sim.env.process(proc()))
    np.testing.assert_allclose(out[0], fresh[0], rtol=1e-9)
    np.testing.assert_allclose(out[1], fresh[1], rtol=1e-9)


@pytest.mark.parametrize("cut_at", [None, 0.0, 3e-6, 45e-6, 130e-6])
def test_run_of_identical_steps_matches_step_by_step(cut_at):
    """FlowNetwork.run replays k identical steps with one event; a newcomer on its links cuts it, and the step in
    flight is solved with the newcomer. Either way every step ends when running the steps one by one says."""
    c = build_cluster("hgx-h100", nodes=2)
    src, dst = np.arange(16), (np.arange(16) + 1) % 16
    k, nbytes = 6, 4 << 20
    newcomer = (np.array([2, 7]), np.array([5, 8]), 2 << 20)  # shares NVLink and a NIC

    def steps(sim, use_run):
        ends, extra = [], {"cuts": 0}

        def newcomer_proc():
            yield sim.env.timeout(cut_at)
            extra["t"] = sim.network.transfer(*newcomer)

        def proc():
            first = sim.network.transfer(src, dst, nbytes, with_latency=False)  # learns the step
            yield first.done
            duration = sim.now
            if cut_at is not None:
                sim.env.process(newcomer_proc())
            while len(ends) < k:
                left = k - len(ends)
                starts = sim.now + duration * np.arange(left)  # back to back (float sums aside)
                run = sim.network.run(src, dst, nbytes, starts) if use_run else None
                if run is None:
                    yield sim.network.transfer(src, dst, nbytes, with_latency=False).done
                    ends.append(sim.now)
                    continue
                yield run.done
                extra["cuts"] += run.cut
                ends.extend((run.starts[:run.completed] + run.offsets.max()).tolist())
                if run.inflight is not None:
                    yield run.inflight.done
                    ends.append(sim.now)

        sim.env.run(sim.env.process(proc()))
        sim.env.run()
        return np.array(ends), extra

    general, g_extra = steps(Simulation(c, "steps"), use_run=False)
    closed, c_extra = steps(Simulation(c, "steps"), use_run=True)
    np.testing.assert_allclose(closed, general, rtol=1e-12)
    assert c_extra["cuts"] == (cut_at is not None)
    if cut_at is not None:
        np.testing.assert_allclose(c_extra["t"].finish, g_extra["t"].finish, rtol=1e-12)
