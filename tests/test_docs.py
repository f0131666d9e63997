"""The docs' examples say what simcomm prints."""
import re
from pathlib import Path

from simcomm.cli import main

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_getting_started_shows_the_error_validate_prints(tmp_path, capsys, monkeypatch):
    """Issue 25: the page showed `my-run.yaml:5` where the run prints `:4`."""
    text = (DOCS / "getting-started.md").read_text()
    yaml = re.search(r"```yaml\n(name: my-run\n.*?)```", text, re.S).group(1)
    shown = re.search(r"```\n(my-run\.yaml:\d+: cluster\.nodez: .*?)\.\.\.\n```", text).group(1)
    (tmp_path / "my-run.yaml").write_text(yaml.replace("  nodes: 2", "  nodez: 2"))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "my-run.yaml"]) != 0
    assert capsys.readouterr().err.splitlines()[0].startswith(shown)


def test_the_schedule_table_is_what_simcomm_computes():
    """docs/training.md's table of pipeline schedules (issue 24): bubble, bubble inside each rank's span, peak
    activations and p2p sends per micro-batch, for p = 4, m = 16, v = 2, F = I = W = 1 per whole stage."""
    from simcomm.parallel.pipeline_parallel.actions import INPUT_GRADIENT, computations
    from simcomm.parallel.pipeline_parallel.schedules import SCHEDULES, schedule
    from simcomm.parallel.pipeline_parallel.timeline import costs, holes, idle, peak_in_flight, timeline
    text = (DOCS / "training.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| ([\d.]+) \| ([\d.]+) \| [^|]+ \| ([\d.]+) \| [^|]+ \| (\d+) \| (\d)x \|$", text,
                      re.M)
    assert {r[0] for r in rows} == set(SCHEDULES)
    for name, bubble, inside, peak, sends, params in rows:
        spec = SCHEDULES[name]
        chunks = 1 if spec.chunks == "one" else 2
        sched, place = schedule(name, 4, 16, chunks), spec.placement(4, chunks)
        size = place.pp / place.stages  # a chunk's share of a stage
        times = timeline(sched, costs(size, size, size), placement=place)
        sent = 0  # outputs that go to another rank: a forward's activations, an input gradient
        for r, acts in enumerate(sched):
            for a in computations(acts):
                to = place.next(r, a.chunk) if a.phase == "F" else \
                    place.prev(r, a.chunk) if a.phase in INPUT_GRADIENT else None
                sent += to is not None and to[0] != r
        assert (max(idle(times)), max(holes(times)), max(peak_in_flight(a) for a in sched) * size, sent / 16) \
            == (float(bubble), float(inside), float(peak), float(sends)), name
        assert int(params) == (2 if place.style == "dual" else 1)
