"""Pipeline schedules: complete, deadlock-free, Megatron's warm-up counts, and the bubble and memory laws."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.errors import SimcommError
from simcomm.parallel.pipeline_parallel.actions import BACKWARD, FORWARD, Action
from simcomm.parallel.pipeline_parallel.schedules import gpipe, interleaved_1f1b, one_f_one_b, schedule
from simcomm.parallel.pipeline_parallel.timeline import bubble_fraction, makespan, peak_in_flight, timeline


def complete(sched, m, v=1):
    want = sorted((ph, mb, c) for ph in (FORWARD, BACKWARD) for mb in range(m) for c in range(v))
    return all(sorted(tuple(a) for a in acts) == want for acts in sched)


@settings(max_examples=60, deadline=None)
@given(pp=st.integers(1, 8), m=st.integers(1, 24), v=st.integers(1, 4), which=st.sampled_from(["gpipe", "1f1b",
                                                                                               "interleaved_1f1b"]))
def test_every_schedule_is_complete_and_deadlock_free(pp, m, v, which):
    chunks = v if which == "interleaved_1f1b" else 1
    if chunks > 1 and m % pp:
        with pytest.raises(SimcommError, match="would deadlock"):
            schedule(which, pp, m, chunks)
        m = pp * (m // pp + 1)
    sched = schedule(which, pp, m, chunks)
    assert len(sched) == pp and complete(sched, m, chunks)
    for acts in sched:  # a rank never runs a backward before its own forward of the same microbatch and chunk
        seen = set()
        for a in acts:
            if a.phase == FORWARD:
                seen.add((a.microbatch, a.chunk))
            else:
                assert (a.microbatch, a.chunk) in seen
    timeline(sched)  # raises on deadlock


def test_megatron_warmup_counts():
    s = one_f_one_b(4, 8)  # warm-up p - r - 1, then F, B: the first backward comes right after one more forward
    assert [next(i for i, a in enumerate(acts) if a.phase == BACKWARD) for acts in s] == [4, 3, 2, 1]
    assert s[3][:4] == [Action("F", 0), Action("B", 0), Action("F", 1), Action("B", 1)]
    s = interleaved_1f1b(4, 8, 2)  # warm-up 2(p - r - 1) + (v - 1) * p, then F, B
    assert [next(i for i, a in enumerate(acts) if a.phase == BACKWARD) for acts in s] == [11, 9, 7, 5]
    assert [str(a) for a in s[0][:8]] == ["F0", "F1", "F2", "F3", "F0.1", "F1.1", "F2.1", "F3.1"]
    assert s[0][interleaved_first_backward(s[0])] == Action("B", 0, 1)  # backwards start from the last chunk
    all_warm = interleaved_1f1b(4, 4, 2)  # m == p: every forward first
    assert all(acts[:8] == [a for a in acts if a.phase == FORWARD] for acts in all_warm)


def interleaved_first_backward(acts):
    return next(i for i, a in enumerate(acts) if a.phase == BACKWARD)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 16), (8, 8), (8, 32), (3, 7)])
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_bubble_is_p_minus_1_over_m_plus_p_minus_1(name, pp, m):
    tf, tb = 1.0, 2.0
    times = timeline(schedule(name, pp, m), lambda _r, a: tf if a.phase == FORWARD else tb)
    assert makespan(times) == pytest.approx((m + pp - 1) * (tf + tb))
    assert bubble_fraction(times) == pytest.approx((pp - 1) / (m + pp - 1))


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 16, 3), (8, 16, 2), (8, 32, 4)])
def test_interleaving_divides_the_bubble_by_v(pp, m, v):
    tf, tb = 1.0, 2.0  # per microbatch through a whole stage; a chunk is 1/v of it
    times = timeline(interleaved_1f1b(pp, m, v), lambda _r, a: (tf if a.phase == FORWARD else tb) / v)
    ideal = m * (tf + tb)
    assert makespan(times) - ideal == pytest.approx((pp - 1) * (tf + tb) / v)


@pytest.mark.parametrize("pp,m", [(4, 8), (4, 3), (8, 32)])
def test_activations_held_gpipe_m_1f1b_at_most_p(pp, m):
    assert [peak_in_flight(acts) for acts in gpipe(pp, m)] == [m] * pp
    held = [peak_in_flight(acts) for acts in one_f_one_b(pp, m)]
    assert held == [min(pp - r, m) for r in range(pp)] and max(held) <= pp


def test_a_broken_order_is_reported_as_a_deadlock():
    bad = one_f_one_b(2, 2)
    bad[1] = [Action("B", 0), Action("F", 0), Action("F", 1), Action("B", 1)]
    with pytest.raises(SimcommError, match="deadlocks: .*rank 1 waits to run B0"):
        timeline(bad)


def test_interleaved_with_a_larger_last_group_runs():
    timeline(interleaved_1f1b(4, 10, 2, group_size=6))  # 10 % 6 = 4 >= p: allowed, and deadlock-free


def test_names_and_bad_arguments():
    assert schedule("Interleaved1F1B", 2, 4, 2) == interleaved_1f1b(2, 4, 2)
    with pytest.raises(SimcommError, match="unknown pipeline schedule"):
        schedule("zigzag", 2, 4)
    with pytest.raises(SimcommError, match="runs one model chunk per rank; got 2 .* need one of interleaved_1f1b, "
                                           "looped_bfs, interleaved_zb, zbv, dualpipe, dualpipev"):
        schedule("1f1b", 2, 4, 2)
    with pytest.raises(SimcommError, match="number of microbatches must be"):
        one_f_one_b(2, 0)
