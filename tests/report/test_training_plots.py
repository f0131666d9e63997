"""The schedule PNG: the whole step when it is small enough to read, else the first passes with a note saying so
(a 64-micro-batch interleaved pipeline drew 640 one-pixel boxes per stage)."""
import pytest
from PIL import Image

from simcomm.engine.trace import Activity
from simcomm.parallel.pipeline_parallel.actions import FORWARD
from simcomm.parallel.pipeline_parallel.schedules import one_f_one_b
from simcomm.parallel.pipeline_parallel.timeline import timeline
from simcomm.report.training_plots import plot_schedule


def passes(pp: int, m: int) -> list[Activity]:
    """The pass records of a 1F1B pipeline (forward 1 s, backward 2 s), as the step model tags them."""
    out = []
    for t in (t for rank in timeline(one_f_one_b(pp, m)) for t in rank):  # forward 1 s, backward 2 s
        phase = "forward" if t.action.phase == FORWARD else "backward"
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
