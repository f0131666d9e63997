"""FlowNetwork on real clusters: exact uncontended times, fair sharing, late starters, bytes conservation."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm import build_cluster
from simcomm.engine import Simulation

H100 = build_cluster("hgx-h100")
H100_2 = build_cluster("hgx-h100", nodes=2)
PCIE = build_cluster("pcie-4gpu")


def new_sim(cluster=H100):
    return Simulation(cluster)


def start_at(sim, when, *args, **kw):
    """Start a transfer at simulated time `when`; returns a dict that holds it once started."""
    box = {}

    def proc():
        yield sim.env.timeout(when)
        box["t"] = sim.network.transfer(*args, **kw)

    sim.env.process(proc())
    return box


def uncontended(cluster, src, dst, nbytes):
    bw, lat = cluster.bottleneck(src, dst)
    return lat + nbytes / bw


@pytest.mark.parametrize("cluster, src, dst", [(H100, 0, 1), (H100, 5, 2), (PCIE, 0, 1), (PCIE, 1, 2),
                                               (H100_2, 0, 8), (H100_2, 3, 11), (H100_2, 12, 7)])
@pytest.mark.parametrize("nbytes", [0, 1, 4096, 1e9])
def test_single_flow_is_latency_plus_bytes_over_bottleneck(cluster, src, dst, nbytes):
    sim = new_sim(cluster)
    t = sim.network.transfer(src, dst, nbytes)
    sim.env.run()
    links = cluster.route(src, dst)
    expected = float(cluster.link_latency[links].sum()) + nbytes / float(cluster.link_capacity[links].min())
    assert t.done.processed
    assert t.finish[0] == pytest.approx(expected, rel=1e-12)
    assert sim.now == pytest.approx(expected, rel=1e-12)
    assert sim.network.active_flows == 0


def test_disjoint_flows_do_not_slow_each_other():
    sim = new_sim()
    nbytes = 1e8
    t = sim.network.transfer([0, 2, 4, 6], [1, 3, 5, 7], nbytes)
    sim.env.run()
    np.testing.assert_allclose(t.finish, uncontended(H100, 0, 1, nbytes), rtol=1e-12)


@pytest.mark.parametrize("shape", ["one batch", "two transfers", "shared downlink only"])
def test_two_flows_on_one_link_each_take_twice_as_long(shape):
    sim = new_sim()
    nbytes = 1e9
    bw, lat = H100.bottleneck(0, 1)
    if shape == "one batch":
        ts = [sim.network.transfer([0, 0], [1, 1], nbytes)]
    elif shape == "two transfers":
        ts = [sim.network.transfer(0, 1, nbytes), sim.network.transfer(0, 1, nbytes)]
    else:  # 0->1 and 2->1 share only the NVSwitch port into GPU 1
        ts = [sim.network.transfer(0, 1, nbytes), sim.network.transfer(2, 1, nbytes)]
    sim.env.run()
    finishes = np.concatenate([t.finish for t in ts])
    np.testing.assert_allclose(finishes, lat + 2 * nbytes / bw, rtol=1e-12)
    assert sim.now == pytest.approx(lat + 2 * nbytes / bw, rel=1e-12)


def test_flow_starting_halfway_through_another():
    """A (B bytes) starts at 0 alone; at B/(2 bw) it is half done and C (B bytes) joins on the same link.

    From then each gets bw/2: A's last half takes B/bw, so A stops sending at 1.5 B/bw. C has sent B/2 by then
    and sends its last half alone at full rate: it stops at 2 B/bw. Each arrives one route latency later.
    """
    sim = new_sim()
    nbytes = 1e9
    bw, lat = H100.bottleneck(0, 1)
    a = sim.network.transfer(0, 1, nbytes)
    c = start_at(sim, nbytes / (2 * bw), 0, 1, nbytes)
    sim.env.run()
    assert a.finish[0] == pytest.approx(1.5 * nbytes / bw + lat, rel=1e-12)
    assert c["t"].start == pytest.approx(0.5 * nbytes / bw, rel=1e-12)
    assert c["t"].finish[0] == pytest.approx(2.0 * nbytes / bw + lat, rel=1e-12)


def test_unequal_sizes_sharing_a_link():
    """B and 3B bytes start together: the small one ends at 2B/bw, the big one then runs alone until 4B/bw."""
    sim = new_sim()
    nbytes = 5e8
    bw, lat = H100.bottleneck(3, 4)
    t = sim.network.transfer([3, 3], [4, 4], [nbytes, 3 * nbytes])
    sim.env.run()
    np.testing.assert_allclose(t.finish, [2 * nbytes / bw + lat, 4 * nbytes / bw + lat], rtol=1e-12)
    assert t.done.processed and sim.now == pytest.approx(4 * nbytes / bw + lat, rel=1e-12)


def test_three_way_share_then_release():
    """Three flows into GPU 0 from GPUs 1, 2, 3 of sizes B, 2B, 3B: finishes at 3B, 5B and 6B over bw."""
    sim = new_sim()
    nbytes = 1e8
    bw, lat = H100.bottleneck(1, 0)
    t = sim.network.transfer([1, 2, 3], [0, 0, 0], [nbytes, 2 * nbytes, 3 * nbytes])
    sim.env.run()
    np.testing.assert_allclose(t.finish, np.array([3, 5, 6]) * nbytes / bw + lat, rtol=1e-12)


def test_inter_node_flows_share_the_nic():
    """Two GPUs on one node sending to the same remote GPU share its NIC downlink (48 GB/s)."""
    sim = new_sim(H100_2)
    nbytes = 1e9
    t = sim.network.transfer([0, 1], [8, 8], nbytes)
    sim.env.run()
    links = [H100_2.route(0, 8), H100_2.route(1, 8)]
    shared = set(links[0].tolist()) & set(links[1].tolist())
    bw = min(float(H100_2.link_capacity[j]) for j in shared)
    for i in range(2):
        lat = float(H100_2.link_latency[links[i]].sum())
        own_bw = float(H100_2.link_capacity[links[i]].min())
        assert t.finish[i] == pytest.approx(lat + max(2 * nbytes / bw, nbytes / own_bw), rel=1e-12)


def test_extra_latency_and_wire_factor():
    sim = new_sim()
    nbytes = 1e6
    bw, lat = H100.bottleneck(0, 1)
    t = sim.network.transfer(0, 1, nbytes, extra_latency=2e-6, wire_factor=1.5)
    sim.env.run()
    assert t.finish[0] == pytest.approx(lat + 2e-6 + 1.5 * nbytes / bw, rel=1e-12)
    sends = [a for a in sim.recorder.activities() if a.kind == "send"]
    assert [a.nbytes for a in sends] == [nbytes]  # the payload, not the wire bytes


def test_done_fires_at_the_last_arrival():
    sim = new_sim(H100_2)
    t = sim.network.transfer([0, 0], [1, 8], 1e6)  # one NVLink flow and one slower network flow
    fired = []
    t.done.callbacks.append(lambda e: fired.append(sim.now))
    sim.env.run()
    assert fired == [pytest.approx(float(t.finish.max()), rel=1e-12)]
    assert t.finish[0] < t.finish[1]


def test_recorded_flows_match_the_request():
    sim = new_sim()
    t = sim.network.transfer([0, 1, 2], [3, 4, 5], [10.0, 20.0, 30.0], label="batch")
    sim.env.run()
    sends = [a for a in sim.recorder.activities() if a.kind == "send"]
    assert sorted((a.rank, a.peer, a.nbytes, a.label) for a in sends) == [
        (0, 3, 10.0, "batch"), (1, 4, 20.0, "batch"), (2, 5, 30.0, "batch")]
    for a in sends:
        assert a.links == tuple(H100.route(a.rank, a.peer).tolist())
        assert a.start == 0 and a.end == pytest.approx(uncontended(H100, a.rank, a.peer, a.nbytes), rel=1e-12)
    assert sim.network.stats["flows"] == 3 and sim.network.stats["transfers"] == 1
    assert t.nbytes.tolist() == [10.0, 20.0, 30.0]


# ---- properties --------------------------------------------------------------------------------------------------
flow_lists = st.lists(
    st.tuples(st.integers(0, 15), st.integers(0, 15), st.floats(0, 1e8), st.floats(0, 2e-3)),
    min_size=1, max_size=25).map(lambda fs: [f for f in fs if f[0] != f[1]]).filter(bool)


@settings(max_examples=60, deadline=None)
@given(flow_lists)
def test_bytes_are_conserved_and_nothing_beats_its_uncontended_time(flows):
    sim = new_sim(H100_2)
    boxes = [start_at(sim, when, s, d, nb) for s, d, nb, when in flows]
    sim.env.run()
    asked = sum(nb for _, _, nb, _ in flows)
    sends = [a for a in sim.recorder.activities() if a.kind == "send"]
    assert len(sends) == len(flows)
    assert sum(a.nbytes for a in sends) == pytest.approx(asked, rel=1e-12)
    assert sim.recorder.flow_count == len(flows)
    for (s, d, nb, when), box in zip(flows, boxes):
        t = box["t"]
        assert t.done.processed and not np.isnan(t.finish).any()
        assert t.start == pytest.approx(when, abs=1e-15)
        # a flow within a hair (1e-12 of the clock) of its last byte finishes at once (FlowNetwork._on_timer)
        assert t.finish[0] >= when + uncontended(H100_2, s, d, nb) * (1 - 1e-9) - 1e-12 * t.finish[0]
    assert sim.network.active_flows == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 7), st.floats(1.0, 1e8), st.floats(0, 1e-3)), min_size=1, max_size=12))
def test_one_bottleneck_link_is_work_conserving(flows):
    """Every flow goes into GPU 0, whose NVSwitch port is the tightest link: it stays busy while there is work,
    so the last byte leaves exactly when a single fluid server that never idles with work would finish."""
    sim = new_sim()
    bw, lat = H100.bottleneck(1, 0)
    boxes = [start_at(sim, when, src, 0, nb) for src, nb, when in flows]
    sim.env.run()
    free = 0.0
    for _, nb, when in sorted(flows, key=lambda f: f[2]):
        free = max(free, when) + nb / bw
    last = max(float(b["t"].finish.max()) for b in boxes)
    assert last == pytest.approx(free + lat, rel=1e-9)


def link_bytes(link_loads) -> dict:
    """Bytes each link carried: the integral of its recorded load."""
    return {link: float(np.sum(r[:-1] * np.diff(t))) for link, (t, r) in link_loads.steps().items()}


@settings(max_examples=60, deadline=None)
@given(flow_lists, st.integers(1, 3))
def test_link_loads_are_the_solver_rates(flows, repeats):
    """Each link's recorded load never exceeds its capacity, ends at zero, and integrates to the wire bytes of
    the flows that cross it, whether the rates came from a solve or from a replayed trajectory (`repeats` > 1
    replays each batch once it has run alone, and later batches interrupt replays)."""
    sim = new_sim(H100_2)
    expected: dict[int, float] = {}
    for k in range(repeats):
        for s, d, nb, when in flows:
            start_at(sim, k * 3e-3 + when, s, d, nb, wire_factor=1.25)
            for link in H100_2.route(s, d).tolist():
                expected[link] = expected.get(link, 0.0) + 1.25 * nb
    sim.env.run()
    loads = sim.recorder.link_loads
    got = link_bytes(loads)
    assert set(got) <= set(expected)
    for link, nb in expected.items():
        # A flow within a relative hair (1e-12 of the clock) of its end finishes at once: bytes it leaves unsent
        slack = H100_2.link_capacity[link] * 1e-12 * sim.now * len(flows) * repeats
        assert got.get(link, 0.0) == pytest.approx(nb, rel=1e-9, abs=slack + 1e-3)
    for link, (t, r) in loads.steps().items():
        assert (r <= H100_2.link_capacity[link] * (1 + 1e-9)).all() and r[-1] == 0 and (np.diff(t) > 0).all()


def test_link_loads_of_a_replayed_batch_are_the_solved_ones():
    """The second run of a batch is replayed (no solve); its link loads are the first run's, shifted in time."""
    sim = new_sim(H100_2)
    src = np.arange(16)
    dst = (src + 1) % 16
    starts = []

    def proc():
        for _ in range(2):
            starts.append(sim.now)
            yield sim.network.transfer(src, dst, [8 << 20] * 8 + [1 << 20] * 8).done

    sim.env.run(sim.env.process(proc()))
    assert sim.network.stats["closed_form"] == 1
    for link, (t, r) in sim.recorder.link_loads.steps().items():
        first, second = t < starts[1], t >= starts[1]
        np.testing.assert_allclose(t[second] - starts[1], t[first] - starts[0], rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(r[second], r[first])


def test_steps_detail_keeps_no_link_loads():
    sim = Simulation(H100, detail="steps")
    sim.network.transfer(0, 1, 1e6)
    sim.env.run()
    assert sim.recorder.link_loads is None and sim.network.link_loads is None
