"""The clocks over a run of identical steps, on one clock per class: the very floats of applying the step one start
at a time (chains.py's recurrence), whether latency hides behind the steps or not."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.algorithms.chains import StepMap, advance


def one_at_a_time(r, m, starts):
    r = r.copy()
    for t in starts.tolist():
        arrival = np.where(m.pred >= 0, np.maximum(r[np.maximum(m.pred, 0)], t), -np.inf)
        arrival = arrival + ((t + m.off) - t + m.lat)
        r = np.maximum(r, arrival)
        if m.add is not None:
            r = r + m.add
        if m.hbm is not None:
            r = np.maximum(r, t + m.hbm)
    return r


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 12), steps=st.integers(1, 60), seed=st.integers(0, 10**6), period=st.floats(1e-7, 1e-3),
       lat_scale=st.sampled_from([1e-9, 1e-6, 1e-4, 1e-2]), add=st.booleans(), hbm=st.booleans(),
       ring=st.booleans())
def test_advance_is_the_step_by_step_recurrence(n, steps, seed, period, lat_scale, add, hbm, ring):
    rng = np.random.default_rng(seed)
    pred = (np.arange(n) - 1) % n if ring else rng.integers(-1, n, n)
    off = np.where(pred >= 0, rng.uniform(0, period, n), -np.inf)
    lat = rng.uniform(0, lat_scale, n)
    m = StepMap(pred, off, lat, rng.uniform(0, period / 4, n) if add else None,
                np.where(rng.random(n) < 0.5, rng.uniform(0, 2 * period, n), -np.inf) if hbm else None)
    starts = np.cumsum(np.full(steps, period)) + 0.125
    r = rng.uniform(0, 2 * lat_scale, n) + 0.125
    assert np.array_equal(advance(r, m, starts), one_at_a_time(r, m, starts))


def test_a_long_ring_with_hidden_latency():
    n, steps = 64, 5000
    m = StepMap((np.arange(n) - 1) % n, np.full(n, 1e-6), np.full(n, 3e-7))
    starts = 0.5 + np.arange(steps) * 1e-6 * 1.0000001
    r = np.full(n, 0.5)
    assert np.array_equal(advance(r, m, starts), one_at_a_time(r, m, starts))
