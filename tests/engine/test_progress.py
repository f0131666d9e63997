"""Where in time a compute job did its work (engine/progress.py): offsets into the work map to the times they were
reached, slowdowns included, so a trace can place the kernels of a long job where they ran."""
import numpy as np
import pytest

from simcomm.engine import IDLE_KERNEL, MEMORY_KERNEL, Mix, Simulation
from simcomm.hardware import build_cluster

CLUSTER = build_cluster("hgx-h100")  # 132 SMs
HALVES = Mix([0.5, 0.5], [MEMORY_KERNEL, IDLE_KERNEL])  # a memory-bound kernel, then a wait that nothing slows


def run(interference, mix=HALVES, occupy=(0.2e-3, 0.7e-3), ranks=(0, 1)):
    s = Simulation(CLUSTER, "steps", interference=interference)
    got = {}
    progress = s.compute.run(np.asarray(ranks, dtype=np.int64), 1e-3, lambda ends: got.setdefault("ends", ends), mix)
    release = []
    s.env.timeout(occupy[0]).callbacks.append(lambda _e: release.append(s.compute.occupy([0], 32)))
    s.env.timeout(occupy[1]).callbacks.append(lambda _e: release[0] and release[0]())
    s.env.run()
    return progress, got["ends"]


def test_alone_an_offset_is_reached_that_long_after_the_start():
    progress, ends = run(False)
    assert progress.ranks == [0, 1]
    assert progress.times(0, [0.0, 0.25e-3, 1e-3]).tolist() == pytest.approx([0.0, 0.25e-3, 1e-3])
    assert ends.tolist() == [1e-3, 1e-3]


def test_a_slowed_kernel_takes_longer_and_the_wait_after_it_does_not():
    progress, ends = run(True)
    t = progress.times(0, [0.0, 0.2e-3, 0.5e-3, 1e-3])
    assert t[0] == 0.0 and t[1] == pytest.approx(0.2e-3)  # alone until the SMs are taken
    assert t[2] > 0.5e-3  # the memory-bound half ran slower while they were held
    assert t[3] == ends[0] and t[3] - t[2] == pytest.approx(0.5e-3)  # the idle half: as long as alone
    assert progress.times(1, [0.5e-3, 1e-3]).tolist() == pytest.approx([0.5e-3, 1e-3])  # rank 1 was never slowed


def test_offsets_map_to_times_in_order():
    progress, ends = run(True, Mix([0.3, 0.2, 0.5], [MEMORY_KERNEL, IDLE_KERNEL, MEMORY_KERNEL]), (0.1e-3, 0.45e-3))
    offsets = np.linspace(0.0, 1e-3, 41)
    t = progress.times(0, offsets)
    assert (np.diff(t) >= 0).all() and t[0] == 0.0 and t[-1] == ends[0]
    assert (np.diff(t) >= np.diff(offsets) - 1e-15).all()  # nothing runs faster than alone
