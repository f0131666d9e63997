"""The schedule PNG: the whole step when it is small enough to read, else the first passes with a note saying so
(a 64-micro-batch interleaved pipeline drew 640 one-pixel boxes per stage)."""
import pytest
from PIL import Image

from simcomm.engine.trace import Activity
from simcomm.parallel.pipeline_parallel.actions import PHASE_NAMES
from simcomm.parallel.pipeline_parallel.schedules import schedule
from simcomm.parallel.pipeline_parallel.timeline import timeline
from simcomm.report.training_plots import PHASE_COLORS, plot_schedule


def passes(pp: int, m: int, name: str = "1f1b") -> list[Activity]:
    """The pass records of a pipeline (forward 1 s, backward 2 s, its I and W halves 1 s each), as the step
    model tags them."""
    out = []
    for t in (t for rank in timeline(schedule(name, pp, m)) for t in rank):
        phase = PHASE_NAMES[t.action.phase]
        out.append(Activity(t.rank, "compute", t.start, t.end, 0.0, str(t.action),
                            tags={"stage": t.rank, "microbatch": t.action.microbatch, "chunk": 0, "phase": phase}))
    return out


@pytest.mark.parametrize("m,note", [(8, "the whole step"), (64, "the first 64 of the 128 passes")])
def test_a_long_schedule_draws_its_first_passes_and_says_so(tmp_path, m, note):
    path = plot_schedule(passes(4, m), tmp_path / "schedule.png", "test")
    assert path.read_bytes().startswith(b"\x89PNG")
    description = Image.open(path).info["Description"]
    assert note in description
    if m == 64:  # the step: (m + pp - 1) x 3 s; stage 0's 64th pass, F33 after 3 warm-up forwards and 30 pairs,
        # ends at 13 s (F4, after B0 came back at 12 s) + 29 x 3 s
        assert description.startswith("showing the first 100 s of the 201 s step")


def test_a_split_backward_is_drawn_in_two_colours_of_its_own(tmp_path):
    """ZB-H1: the input-gradient and weight-gradient passes told apart from each other and from a whole
    backward: each colour fills boxes (far more pixels than its legend patch), and I and W only where they ran."""
    def area(path):
        return {"#%02x%02x%02x" % px[:3]: n for n, px in Image.open(path).convert("RGB").getcolors(1 << 20)}
    zb = area(plot_schedule(passes(4, 8, "zb_h1"), tmp_path / "zb.png", "ZB-H1"))
    plain = area(plot_schedule(passes(4, 8), tmp_path / "1f1b.png", "1F1B"))
    legend = 400  # pixels of a legend patch, at most
    assert zb[PHASE_COLORS["backward_input"]] > 20 * legend and zb[PHASE_COLORS["backward_weight"]] > 20 * legend
    assert zb.get(PHASE_COLORS["backward"], 0) < legend < plain[PHASE_COLORS["backward"]]
    assert PHASE_COLORS["backward_input"] not in plain and PHASE_COLORS["backward_weight"] not in plain
