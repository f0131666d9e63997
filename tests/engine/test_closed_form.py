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
