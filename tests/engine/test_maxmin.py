"""max_min_rates: hand-computed small cases and the defining properties on random topologies."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.engine import max_min_rates


def rates(classes, capacity, counts=None):
    links = [np.asarray(c, dtype=np.int64) for c in classes]
    counts = np.ones(len(links), dtype=np.int64) if counts is None else np.asarray(counts, dtype=np.int64)
    return max_min_rates(links, counts, np.asarray(capacity, dtype=np.float64))


def test_two_flows_on_one_link_each_get_half():
    assert rates([[0], [0]], [10.0]).tolist() == [5.0, 5.0]


def test_one_class_of_two_flows_gets_half_each():
    assert rates([[0]], [10.0], counts=[2]).tolist() == [5.0]


def test_lone_flow_gets_its_bottleneck():
    assert rates([[0, 1, 2]], [10.0, 3.0, 7.0]).tolist() == [3.0]


def test_flow_with_no_links_is_infinitely_fast():
    r = rates([[], [0]], [10.0])
    assert r[0] == np.inf and r[1] == 10.0


def test_parking_lot():
    """One long flow across two links plus one short flow on each: all share equally."""
    assert rates([[0, 1], [0], [1]], [10.0, 10.0]).tolist() == [5.0, 5.0, 5.0]


def test_unequal_parking_lot():
    """Link 1 (capacity 4) splits 2/2; the short flow on link 0 takes what the long flow leaves: 8."""
    assert rates([[0, 1], [0], [1]], [10.0, 4.0]).tolist() == pytest.approx([2.0, 8.0, 2.0])


def test_classic_three_link_example():
    """Capacities 10, 8, 3. f0 crosses links 0,1,2; f1 link 0; f2 links 1,2; f3 link 1.

    Fill: link 2 (3 shared by f0, f2) saturates first at 1.5 each. Link 1 then has 8 - 3 = 5 left for f3;
    link 0 has 10 - 1.5 = 8.5 left for f1.
    """
    r = rates([[0, 1, 2], [0], [1, 2], [1]], [10.0, 8.0, 3.0])
    assert r.tolist() == pytest.approx([1.5, 8.5, 1.5, 5.0], rel=1e-12)


def test_counts_weight_the_share():
    """Three flows of one class and one of another on a link of 8: 2 each."""
    assert rates([[0], [0]], [8.0], counts=[3, 1]).tolist() == [2.0, 2.0]


def test_unused_links_do_not_matter():
    assert rates([[3]], [1.0, 1.0, 1.0, 6.0]).tolist() == [6.0]


# ---- properties on random topologies ---------------------------------------------------------------------------
@st.composite
def topologies(draw):
    num_links = draw(st.integers(1, 7))
    capacity = draw(st.lists(st.floats(0.5, 1e3, allow_nan=False, allow_infinity=False),
                             min_size=num_links, max_size=num_links))
    num_classes = draw(st.integers(1, 9))
    classes = [sorted(draw(st.sets(st.integers(0, num_links - 1), min_size=1, max_size=num_links)))
               for _ in range(num_classes)]
    counts = draw(st.lists(st.integers(1, 5), min_size=num_classes, max_size=num_classes))
    return classes, np.asarray(capacity), np.asarray(counts)


def link_loads(classes, counts, r, num_links):
    load = np.zeros(num_links)
    for links, k, rate in zip(classes, counts, r):
        load[links] += k * rate
    return load


@settings(max_examples=300, deadline=None)
@given(topologies())
def test_max_min_properties(topo):
    classes, capacity, counts = topo
    r = rates(classes, capacity, counts)
    assert r.shape == (len(classes),)
    assert np.all(np.isfinite(r)) and np.all(r > 0)
    load = link_loads(classes, counts, r, len(capacity))
    # Feasible: no link carries more than its capacity.
    assert np.all(load <= capacity * (1 + 1e-9))
    # Max-min: every flow has a bottleneck, a saturated link on which no flow gets more than it does.
    for c, links in enumerate(classes):
        ok = False
        for link in links:
            saturated = load[link] >= capacity[link] * (1 - 1e-9)
            on_link = [r[d] for d, other in enumerate(classes) if link in other]
            if saturated and r[c] >= max(on_link) * (1 - 1e-9):
                ok = True
                break
        assert ok, f"class {c} (rate {r[c]}) has no bottleneck link"


@settings(max_examples=100, deadline=None)
@given(topologies())
def test_splitting_a_class_changes_nothing(topo):
    """k flows on one route counted once with count k, or as k separate classes, get the same rates."""
    classes, capacity, counts = topo
    grouped = rates(classes, capacity, counts)
    flat_classes = [links for links, k in zip(classes, counts) for _ in range(k)]
    flat = rates(flat_classes, capacity)
    expanded = np.repeat(grouped, counts)
    np.testing.assert_allclose(flat, expanded, rtol=1e-9)


@settings(max_examples=100, deadline=None)
@given(topologies(), st.floats(0.1, 100.0))
def test_scaling_capacities_scales_rates(topo, factor):
    classes, capacity, counts = topo
    np.testing.assert_allclose(rates(classes, capacity * factor, counts), rates(classes, capacity, counts) * factor,
                               rtol=1e-9)



def textbook_filling(lengths, pair_link, counts, capacity):
    """Progressive filling over every (class, link) pair, none left out."""
    num = len(lengths)
    out = np.where(lengths == 0, np.inf, 0.0)
    pair_class = np.repeat(np.arange(num), lengths)
    residual = capacity.astype(np.float64)
    full = capacity * 1e-9
    weight = np.asarray(counts, dtype=np.float64)[pair_class]
    level = 0.0
    while len(pair_class):
        load = np.bincount(pair_link, weights=weight, minlength=len(capacity))
        used = load > 0
        share = residual[used] / load[used]
        delta = share.min()
        level += delta
        residual -= delta * load
        newly = np.zeros(num, dtype=bool)
        newly[pair_class[(used & (residual <= full))[pair_link]]] = True
        if not newly.any():
            tight = used.copy()
            tight[used] = share <= delta * (1 + 1e-12)
            newly[pair_class[tight[pair_link]]] = True
        out[newly] = level
        keep = ~newly[pair_class]
        pair_class, pair_link, weight = pair_class[keep], pair_link[keep], weight[keep]
    return out


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 10**6), classes=st.integers(1, 400), shared=st.integers(1, 60))
def test_leaving_out_dominated_private_links_changes_no_rate(seed, classes, shared):
    """Large problems leave out the links only one class crosses but its narrowest (maxmin._drop_dominated; here
    every problem): the rates are the textbook filling's, bit for bit."""
    from simcomm.engine import maxmin
    from simcomm.engine.maxmin import max_min_rates_csr
    saved, maxmin._PRIVATE_FROM = maxmin._PRIVATE_FROM, 0
    rng = np.random.default_rng(seed)
    own = rng.integers(1, 5, classes)  # each class's private links
    cross = rng.integers(0, 3, classes)  # and shared ones
    cross = np.minimum(cross, shared)
    lengths = own + cross
    links, next_private = [], shared
    for o, x in zip(own, cross):
        links.append(np.r_[np.arange(next_private, next_private + o), rng.choice(shared, x, replace=False)])
        next_private += o
    flat = np.concatenate(links).astype(np.int64)
    capacity = rng.choice([12e9, 24e9, 48e9, 48e9, 370e9], next_private).astype(float)
    counts = rng.integers(1, 4, classes).astype(float)
    starts = np.cumsum(lengths) - lengths
    try:
        got = max_min_rates_csr(lengths, starts, flat, counts, capacity)
    finally:
        maxmin._PRIVATE_FROM = saved
    assert np.array_equal(got, textbook_filling(lengths, flat, counts, capacity))
