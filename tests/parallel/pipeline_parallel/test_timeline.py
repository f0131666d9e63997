"""timeline.check decides its rules on whole lists and walks only a schedule that breaks one, to name the fault:
the two must agree on every schedule, well formed or not."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcomm.errors import SimcommError
from simcomm.parallel.pipeline_parallel.actions import PHASE_NAMES, Action, Overlap
from simcomm.parallel.pipeline_parallel.schedules import SCHEDULES, SPECS, schedule
from simcomm.parallel.pipeline_parallel.timeline import _holds, _name_fault, check


def _sizes(name: str, pp: int, m: int) -> tuple[int, int, int]:
    spec = SCHEDULES[name]
    pp = max(pp + pp % 2 if spec.even_pp else pp, spec.min_pp, 2 if spec.chunks in ("two", "many") else 1)
    chunks = {"one": 1, "two": 2, "any": 2, "many": 2}[spec.chunks]
    m = max(m, spec.min_microbatches(pp), pp if spec.chunks in ("any", "many") else 1)
    m = pp * -(-m // pp) if spec.chunks in ("any", "many") else m + (m % 2 if spec.even_microbatches else 0)
    return pp, m, chunks


def _mutate(data, sched: list[list]) -> None:
    """One edit a hand-written or buggy schedule could have: two actions swapped (or neighbours), one dropped,
    duplicated, moved to another rank, given another micro-batch, chunk or phase, an overlapped pair split, or every
    pass of one micro-batch and chunk left out of a rank."""
    r = data.draw(st.integers(0, len(sched) - 1))
    acts = sched[r]
    if not acts:
        return
    i, j = data.draw(st.integers(0, len(acts) - 1)), data.draw(st.integers(0, len(acts) - 1))
    a = acts[i]
    kind = data.draw(st.sampled_from(["swap", "next", "drop", "copy", "move", "microbatch", "chunk", "phase",
                                      "split", "forget"]))
    if kind in ("swap", "next"):
        j = min(i + 1, len(acts) - 1) if kind == "next" else j
        acts[i], acts[j] = acts[j], acts[i]
    elif kind == "forget":
        key = (a.parts[0] if isinstance(a, Overlap) else a)[1:]
        acts[:] = [x for y in acts for x in ((y,) if not isinstance(y, Overlap) else
                                              y.parts if key in (y.forward[1:], y.backward[1:]) else (y,))
                   if x[1:] != key]
    elif kind == "drop":
        del acts[i]
    elif kind == "copy":
        acts.insert(j, a)
    elif kind == "move":
        sched[data.draw(st.integers(0, len(sched) - 1))].insert(j, acts.pop(i))
    elif kind == "split" and isinstance(a, Overlap):
        acts[i:i + 1] = list(a.parts)
    elif isinstance(a, Action):
        field = {"microbatch": 1, "chunk": 2, "phase": 0}.get(kind)
        if field is not None:
            value = data.draw(st.sampled_from(sorted(PHASE_NAMES)) if field == 0 else st.integers(0, 3))
            acts[i] = a._replace(**{a._fields[field]: value})


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from([s.name for s in SPECS]), pp=st.integers(1, 5), m=st.integers(1, 10),
       edits=st.integers(0, 3), data=st.data())
def test_check_decides_as_its_walk_names_faults(name, pp, m, edits, data):
    pp, m, chunks = _sizes(name, pp, m)
    placement = SCHEDULES[name].placement(pp, chunks)
    sched = [list(acts) for acts in schedule(name, pp, m, chunks)]
    for _ in range(edits):
        _mutate(data, sched)
    try:
        _name_fault(sched, placement)
    except SimcommError as exc:  # the walk names a fault: the lists find one too, and check raises the walk's
        assert not _holds(sched, placement)
        with pytest.raises(SimcommError) as got:
            check(sched, placement)
        assert str(got.value) == str(exc)
    except AssertionError:  # the walk finds none: neither do the lists
        assert _holds(sched, placement)
        check(sched, placement)
