"""The recorder's link loads: step functions kept as changes only."""
import numpy as np

from simcomm.engine.trace import LinkLoads


def test_link_loads_keep_changes_and_the_last_value_per_instant():
    loads = LinkLoads(4)
    loads.set(0.0, np.array([0.0, 5.0, 5.0, 0.0]))
    loads.set(1.0, np.array([0.0, 5.0, 7.0, 0.0]))  # only link 2 changed
    loads.set(1.0, np.array([0.0, 5.0, 8.0, 0.0]))  # same instant: the last value wins
    loads.set(2.0, np.array([0.0, 5.0, 8.0, 0.0]))  # nothing changed: nothing kept
    loads.set(3.0, np.zeros(4))
    steps = loads.steps()
    assert sorted(steps) == [1, 2]
    assert steps[1][0].tolist() == [0.0, 3.0] and steps[1][1].tolist() == [5.0, 0.0]
    assert steps[2][0].tolist() == [0.0, 1.0, 3.0] and steps[2][1].tolist() == [5.0, 8.0, 0.0]
    assert LinkLoads(3).steps() == {}
