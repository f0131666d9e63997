"""The engine never schedules at a time that is not finite (issue 13: nan timestamps looped in the timer)."""
import pytest

from simcomm import SimcommError, build_cluster
from simcomm.engine import Simulation


@pytest.mark.parametrize("delay", [float("nan"), float("inf")])
def test_the_engine_refuses_to_schedule_at_nan_or_inf(delay):
    sim = Simulation(build_cluster("hgx-h100"))
    with pytest.raises(SimcommError, match="schedule an event at t=0.* s: a figure or an amount that is not finite"):
        sim.env.timeout(delay)
    sim.env.timeout(1.5)
    assert sim.env.peek() == 1.5


def test_the_engine_checks_the_time_an_event_would_reach_not_only_its_delay():
    """Each delay is finite, their sum is not: at t=1e308 a delay of 1e308 would reach t=inf (the run then ended
    as a 'deadlock at t=inf')."""
    sim = Simulation(build_cluster("hgx-h100"))
    sim.env.timeout(1e308)
    sim.env.step()
    with pytest.raises(SimcommError, match=r"t=1e\+308 \+ 1e\+308 s = inf s: a figure or an amount that is not "
                                           "finite"):
        sim.env.timeout(1e308)
    with pytest.raises(SimcommError, match="= inf s"):
        sim.at(float("inf"))
    assert sim.env.peek() == float("inf") and sim.env.scheduled == 1  # nothing was queued
