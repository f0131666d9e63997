"""Contention: groups sharing a NIC slow each other down; groups on separate NICs do not."""
import pytest

from simcomm.hardware import build_cluster
from simcomm.workloads.contention import GroupSpec, run_contention


def run(groups):
    return run_contention(build_cluster("pcie-4gpu", 2), groups, "steps")[0]


def test_groups_sharing_a_nic_take_twice_as_long():
    # GPUs 0 and 1 of each pcie-4gpu node share NIC 0.
    res = run([GroupSpec("a", [0, 4], size=1 << 28), GroupSpec("b", [1, 5], size=1 << 28)])
    for g in res:
        assert g.slowdown == pytest.approx(2.0, rel=0.05)
        assert g.busbw == pytest.approx(g.size / g.time * 1.0)


def test_groups_on_separate_nics_do_not_interfere():
    res = run([GroupSpec("a", [0, 4], size=1 << 28), GroupSpec("b", [2, 6], size=1 << 28)])
    for g in res:
        assert g.slowdown == pytest.approx(1.0, rel=0.01)


def test_a_later_start_overlaps_only_partly():
    res = run([GroupSpec("a", [0, 4], size=1 << 28), GroupSpec("b", [1, 5], size=1 << 28, start=0.005)])
    a, b = res
    assert b.start == 0.005 and 1.0 < a.slowdown < 2.0 and 1.0 < b.slowdown < 2.0


def test_no_baseline():
    g = run_contention(build_cluster("pcie-4gpu", 2), [GroupSpec("a", [0, 4], size=1 << 20)], "steps",
                       baseline=False)[0][0]
    assert g.alone is None and g.slowdown is None and g.time > 0
