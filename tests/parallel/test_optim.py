"""The optimizers are elementwise: one step on a whole buffer equals steps on its shards (ZeRO), bitwise."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.parallel.optim import SGD, AdamW


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), cut=st.integers(0, 40), seed=st.integers(0, 1000), adam=st.booleans())
def test_a_step_on_shards_equals_a_step_on_the_whole(n, cut, seed, adam):
    rng = np.random.default_rng(seed)
    opt = AdamW(lr=1e-2, weight_decay=0.1) if adam else SGD(lr=0.1, momentum=0.9, weight_decay=0.1)
    p, g = rng.standard_normal((2, n))
    mask = (rng.random(n) > 0.5).astype(float)
    whole, state = p.copy(), opt.state(p)
    cut = min(cut, n)
    parts = [p[:cut].copy(), p[cut:].copy()]
    states = [opt.state(x) for x in parts]
    for _ in range(3):
        opt.step(whole, g, state, mask)
        for x, s, sl in zip(parts, states, (slice(0, cut), slice(cut, n))):
            opt.step(x, g[sl], s, mask[sl])
    np.testing.assert_array_equal(np.concatenate(parts), whole)
