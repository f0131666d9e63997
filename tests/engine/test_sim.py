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


def _order(wait) -> list:
    """What happens at t=1, in order, when two waiters (registered by `wait`) wait on events that fire then, beside
    processes that do their own work at the same instant."""
    import simpy
    env, log = simpy.Environment(), []
    first, second = env.event(), env.event()

    def source():
        yield env.timeout(1)
        first.succeed()
        second.succeed()

    def bystander(name):
        yield env.timeout(1)
        log.append(name)
        yield env.timeout(0)
        log.append(name + " again")
    env.process(bystander("early"))
    env.process(source())
    wait(env, [first], lambda: log.append("after first"))
    wait(env, [first, second], lambda: log.append("after both"))
    env.process(bystander("late"))
    env.run()
    return log


def test_when_all_runs_its_callback_where_a_waiting_process_would_in_the_event_order():
    """when_all replaced a process per waiting send (yield all_of, then call): the same order at an instant keeps
    every simulated number the same."""
    from simcomm.engine import when_all

    def with_a_process(env, events, then):
        def waiter():
            yield env.all_of(events)
            then()
        env.process(waiter())
    expected = _order(with_a_process)
    assert _order(when_all) == expected
    assert expected.index("after first") < expected.index("after both")


def test_when_all_raises_what_the_event_it_waits_for_failed_with():
    import simpy
    from simcomm.engine import when_all
    for count in (1, 2):
        env, called = simpy.Environment(), []
        events = [env.event() for _ in range(count)]
        when_all(env, events, lambda: called.append(True))
        events[0].fail(ValueError("the receive failed"))
        with pytest.raises(ValueError, match="the receive failed"):
            env.run()
        assert not called


def test_a_run_collects_garbage_in_larger_batches_and_restores_the_collector_after():
    """A simulation runs with Python's young-generation threshold raised (fewer_collections; a deep pipeline's step
    spent up to a third of its time collecting), and leaves it as it was: after the run, after a failure in it,
    and untouched where the collector was off or already collected less often."""
    import gc

    from simcomm.engine.sim import _YOUNG
    old = gc.get_threshold()
    try:
        for before, during in [((700, 10, 10), _YOUNG), ((0, 10, 10), 0), ((5 * _YOUNG, 10, 10), 5 * _YOUNG)]:
            gc.set_threshold(*before)
            sim, seen = Simulation(build_cluster("hgx-h100")), []

            def body(env):
                seen.append(gc.get_threshold())
                yield env.timeout(1)
                raise ValueError("the run failed")
            sim.env.process(body(sim.env))
            with pytest.raises(ValueError, match="the run failed"):
                sim.env.run()
            assert seen == [(during, 10, 10)] and gc.get_threshold() == before
    finally:
        gc.set_threshold(*old)
