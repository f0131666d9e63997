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
