"""The split-backward schedules: each well formed, and its bubble and peak activation memory as its paper gives
them with uniform stages and free communication (Qi et al. 2023 Table 2; Qi et al. 2024; DeepSeek-V3 Table 2)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.errors import SimcommError
from simcomm.parallel.pipeline_parallel.actions import (BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD, Action,
                                                        Overlap, computations)
from simcomm.parallel.pipeline_parallel.schedules import SCHEDULES, SPECS, schedule
from simcomm.parallel.pipeline_parallel.timeline import (check, costs, held_at_peaks, holes, idle, makespan,
                                                         peak_in_flight, timeline)

SPLIT = [s.name for s in SPECS if s.splits_backward]


def run(name, pp, m, chunks=1, f=1.0, i=1.0, w=1.0, overlap=None, **kw):
    sched = schedule(name, pp, m, chunks, **kw)
    return sched, timeline(sched, costs(f, i, w, overlap), placement=SCHEDULES[name].placement(pp, chunks))


def sizes(name, pp, m, v):
    """The nearest sizes `name` accepts."""
    spec = SCHEDULES[name]
    chunks = {"one": 1, "two": 2, "any": v, "many": max(v, 2)}[spec.chunks]
    pp = max(pp + pp % 2 if spec.even_pp else pp, spec.min_pp)
    m = max(m, spec.min_microbatches(pp))
    m += m % 2 if spec.even_microbatches else 0
    if name == "interleaved_zb":
        m = max(1, m // pp) * pp if m >= pp else m
    if name == "interleaved_1f1b" and m % pp:
        m = pp * (m // pp + 1)
    return pp, m, chunks


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from([s.name for s in SPECS]), pp=st.integers(1, 8), m=st.integers(1, 20),
       v=st.integers(1, 3))
def test_every_schedule_runs_each_pass_once_in_order_and_finishes(name, pp, m, v):
    pp, m, chunks = sizes(name, pp, m, v)
    sched, times = run(name, pp, m, chunks)
    placement = SCHEDULES[name].placement(pp, chunks)
    for r, acts in enumerate(sched):
        flat = list(computations(acts))
        held = {(a.microbatch, a.chunk) for a in flat}
        if placement.style == "dual":  # each half of the micro-batches through its own copy of the stages
            assert held == {(mb, int(mb >= m // 2)) for mb in range(m)}
        else:
            assert held == {(mb, c) for mb in range(m) for c in range(chunks)}
        for mb, c in held:  # F, then B, or I then W
            phases = "".join(a.phase for a in flat if (a.microbatch, a.chunk) == (mb, c))
            assert phases in ("FB", "FIW") and (phases == "FB" or SCHEDULES[name].splits_backward)
    assert makespan(times) > 0


def test_checks_name_what_is_wrong():
    sched = schedule("zb_h1", 2, 4)
    bad = [list(acts) for acts in sched]
    bad[0].remove(Action(BACKWARD_WEIGHT, 1))
    bad[0].insert(0, Action(BACKWARD_WEIGHT, 1))
    with pytest.raises(SimcommError, match="runs W1 on rank 0 after nothing of that micro-batch"):
        check(bad)
    bad = [list(acts) for acts in sched]
    bad[1] = [a for a in bad[1] if a != Action(BACKWARD_WEIGHT, 3)]
    with pytest.raises(SimcommError, match="never finishes micro-batch 3 chunk 0 on rank 1: it runs only F I"):
        check(bad)
    bad = [list(acts) for acts in schedule("1f1b", 2, 4)]
    bad[0][0], bad[0][1] = bad[0][1], bad[0][0]  # rank 0 sends F1 before F0, rank 1 takes F0 first
    with pytest.raises(SimcommError, match="rank 0 sends the activations of micro-batches 1, 0, 2, 3 to rank 1, "
                                           "which receives them in the order 0, 1, 2, 3"):
        check(bad)
    bad = [[a for a in acts if a.microbatch != 2] for acts in schedule("1f1b", 2, 4)]
    bad[1] += [Action(FORWARD, 2), Action(BACKWARD, 2)]
    with pytest.raises(SimcommError, match="micro-batch 2 runs on rank 1 chunk 0 but not on the previous stage"):
        check(bad)
    bad = [list(acts) for acts in sched]  # rank 0 waits for I0 before it sends F1; rank 1 wants F1 first
    bad[0] = [Action(FORWARD, 0), Action(BACKWARD_INPUT, 0)] + [a for a in bad[0] if a.microbatch or a.phase == "W"]
    bad[1] = [Action(FORWARD, 1)] + [a for a in bad[1] if a != Action(FORWARD, 1)]
    with pytest.raises(SimcommError, match="deadlocks: rank 0 waits to run I0; rank 1 waits to run F1"):
        timeline(bad)


@pytest.mark.parametrize("f,i,w", [(1, 1, 1), (1, 1.5, 0.5), (1, 1.2, 0.8), (2, 1, 1), (1, 1, 0.25)])
@pytest.mark.parametrize("pp", [2, 4, 6, 8])
def test_zb_h1_bubble_and_memory(pp, f, i, w):
    """Qi et al. 2023: ZB-H1's bubble is (p - 1)(T_F + T_B - T_W) (their B is our I) and it holds 1F1B's p
    micro-batches; 1F1B's is (p - 1)(T_F + T_B + T_W)."""
    m = 3 * pp
    sched, times = run("zb_h1", pp, m, f=f, i=i, w=w)
    assert idle(times) == pytest.approx([(pp - 1) * (f + i - w)] * pp)
    assert makespan(times) == pytest.approx(m * (f + i + w) + (pp - 1) * (f + i - w))
    _, base = run("1f1b", pp, m, f=f, i=i, w=w)
    assert idle(base) == pytest.approx([(pp - 1) * (f + i + w)] * pp)
    assert max(peak_in_flight(a) for a in sched) == max(peak_in_flight(a) for a in schedule("1f1b", pp, m)) == pp


@pytest.mark.parametrize("f,i,w", [(1, 1, 1), (1, 1.5, 0.5), (1, 1.2, 0.8), (2, 1, 1)])
@pytest.mark.parametrize("pp", [2, 4, 8])
def test_zb_h2_bubble_and_memory(pp, f, i, w):
    """Qi et al. 2023: ZB-H2 leaves (p - 1)(T_F + T_B - 2 T_W) inside each rank's span (zero for equal passes; the
    skew before and after is filled by the neighbouring steps) and holds 2p - 1 micro-batches."""
    sched, times = run("zb_h2", pp, 4 * pp, f=f, i=i, w=w)
    assert max(holes(times)) == pytest.approx((pp - 1) * max(0.0, f + i - 2 * w), abs=1e-9)
    assert [peak_in_flight(a) for a in sched] == [2 * pp - 1] * pp


@pytest.mark.parametrize("pp", [2, 3, 4, 8])
def test_zbv_has_no_bubble_in_its_span_and_1f1b_memory(pp):
    """Qi et al. 2024: with T_F = T_B = T_W, ZB-V's V placement leaves no bubble inside a rank's span, and each
    rank holds 2p half-stage chunks: 1F1B's p stages' activations."""
    sched, times = run("zbv", pp, 3 * pp, chunks=2, f=0.5, i=0.5, w=0.5)
    assert holes(times) == pytest.approx([0.0] * pp, abs=1e-9)
    assert [peak_in_flight(a) for a in sched] == [2 * pp] * pp
    assert max(holes(run("zbv", pp, 2 * pp - 1, chunks=2)[1])) == 0


@pytest.mark.parametrize("overlap", [None, max, lambda a, b: 0.8 * (a + b)])
@pytest.mark.parametrize("pp", [2, 4, 6, 8])
def test_dualpipe_bubble_and_memory(pp, overlap):
    """DeepSeek-V3 Table 2: DualPipe's bubble is (p/2 - 1)(T_F&B + T_B - 3 T_W) and it holds p + 1 micro-batches'
    activations (and two copies of the parameters); DualPipeV, the same cut in half over 2p half stages, has
    (p - 1)(T_F&B + T_B - 3 T_W) in half-stage passes."""
    fb = overlap(1, 2) if overlap else 3
    sched, times = run("dualpipe", pp, 3 * pp, 2, overlap=overlap)
    assert max(idle(times)) == pytest.approx((pp / 2 - 1) * (fb + 2 - 3))
    assert [peak_in_flight(a) for a in sched] == [pp + 1] * pp
    assert any(isinstance(a, Overlap) for a in sched[0])
    sched, times = run("dualpipev", pp, 3 * pp, 2, overlap=overlap)
    assert max(idle(times)) == pytest.approx((pp - 1) * (fb + 2 - 3))
    assert [peak_in_flight(a) for a in sched] == [2 * pp + 1] * pp


def test_dualpipe_feeds_half_the_microbatches_from_each_end():
    sched = schedule("dualpipe", 4, 8, 2)
    first = [a for a in computations(sched[0]) if a.phase == FORWARD][:4]
    last = [a for a in computations(sched[3]) if a.phase == FORWARD][:4]
    assert first == [Action(FORWARD, 0), Action(FORWARD, 1), Action(FORWARD, 2), Action(FORWARD, 4, 1)]
    assert last == [Action(FORWARD, 4, 1), Action(FORWARD, 5, 1), Action(FORWARD, 6, 1), Action(FORWARD, 0)]


@pytest.mark.parametrize("pp,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 4)])
def test_interleaved_zero_bubble_takes_the_w_out_of_the_interleaved_bubble(pp, m, v):
    """torch's ScheduleInterleavedZeroBubble: the interleaved bubble (p - 1)(T_F + T_B + T_W) / v less the W's."""
    _, times = run("interleaved_zb", pp, m, v, f=1 / v, i=1 / v, w=1 / v)
    assert idle(times) == pytest.approx([(pp - 1) * 1 / v] * pp)
    _, base = run("interleaved_1f1b", pp, m, v, f=1 / v, i=1 / v, w=1 / v)
    assert idle(base) == pytest.approx([(pp - 1) * 3 / v] * pp)


def test_looped_bfs_bubble_as_interleaved_and_memory_all_microbatches():
    sched, times = run("looped_bfs", 4, 8, 2, f=0.5, i=0.5, w=0.5)
    assert idle(times) == pytest.approx([3 * 3 / 2] * 4)  # (p - 1)(T_F + T_B) / v, as interleaved
    assert [peak_in_flight(a) for a in sched] == [16] * 4


@pytest.mark.parametrize("group", [2, 4, 5, 6, 8, 12, 13])
def test_interleaved_runs_with_any_microbatch_group_size(group):
    """Llama 3's flexible micro-batches per round: microbatch_group_size_per_vp_stage other than p, within
    Megatron-LM's bounds (p to m, and a last group of at least p)."""
    pp, m = 4, 12
    if not pp <= group <= m or 0 < m % group < pp:
        with pytest.raises(SimcommError, match="must lie between|would deadlock"):
            schedule("interleaved_1f1b", pp, m, 2, group_size=group)
        return
    sched, times = run("interleaved_1f1b", pp, m, 2, f=0.5, i=0.5, w=0.5, group_size=group)
    forwards = [a for a in sched[0] if a.phase == FORWARD]
    assert forwards[group] == Action(FORWARD, 0, 1)  # the group's micro-batches, then the next chunk
    assert forwards[:group] == [Action(FORWARD, mb) for mb in range(group)]
    assert makespan(times) >= m * 3


def test_memory_peaks_count_what_waits_for_w():
    """Activations peak after a run of forwards; an I frees the input-gradient part and keeps W's inputs."""
    acts = [Action(FORWARD, 0), Action(FORWARD, 1), Action(BACKWARD_INPUT, 0), Action(FORWARD, 2),
            Action(BACKWARD_WEIGHT, 0), Action(BACKWARD, 1), Action(BACKWARD_INPUT, 2), Action(BACKWARD_WEIGHT, 2)]
    assert held_at_peaks(acts, 1) == ((2, 0), (2, 1))
    assert peak_in_flight(acts) == 3


def test_names_in_either_form():
    assert schedule("ZBVZeroBubble", 2, 4, 2) == schedule("zbv", 2, 4, 2)
    assert schedule("DualPipeV", 2, 4, 2) == schedule("dualpipev", 2, 4, 2)
    assert schedule("ZB-H1", 2, 4) == schedule("zb_h1", 2, 4)
    with pytest.raises(SimcommError, match="dualpipe needs an even pipeline_model_parallel_size of at least 2"):
        schedule("dualpipe", 3, 6, 2)
    with pytest.raises(SimcommError, match="dualpipev needs a number of microbatches of at least 8"):
        schedule("dualpipev", 4, 6, 2)
    with pytest.raises(SimcommError, match="zbv runs exactly two model chunks per rank"):
        schedule("zbv", 4, 8, 1)
    assert all(a.phase in (FORWARD, BACKWARD) for acts in schedule("looped_bfs", 2, 2, 1) for a in acts)
