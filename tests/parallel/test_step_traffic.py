"""Replayed collectives take exactly the time of the real one they copy, and only when their links are quiet."""
import numpy as np
import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel.step_traffic import Traffic
from simcomm.session import Session


def run_three(reuse, concurrent_send=False):
    s = Session(build_cluster("hgx-h100", nodes=4))
    tr = Traffic(s, reuse=reuse)
    group = np.array([0, 8, 16, 24])
    ops = []

    def program():
        for _ in range(3):
            if concurrent_send:
                tr.send([8], [17], 256 << 20)
            op = tr.collective("reduce_scatter", group, 64 << 20, "float32", tags={"axis": "dp"})
            ops.append(op)
            yield op
    s.run(s.process(program()))
    return s, tr, ops


def test_a_quiet_repeat_is_replayed_with_the_same_time_and_records():
    s, tr, ops = run_three(True)
    _, real_tr, real_ops = run_three(False)
    assert tr.stats["real"] == 1 and tr.stats["replayed"] == 2 and real_tr.stats["real"] == 3
    assert [o.record.time for o in ops] == pytest.approx([o.record.time for o in real_ops], rel=1e-12)
    assert ops[1].tags["replayed"] and ops[1].record.algorithm == ops[0].record.algorithm
    spans = [a for a in s.sim.recorder.activities() if a.kind == "collective" and a.rank == 0]
    assert len(spans) == 3 and all(a.tags["axis"] == "dp" for a in spans)


def test_busy_links_force_a_real_run():
    _, tr, ops = run_three(True, concurrent_send=True)
    assert tr.stats["replayed"] == 0 and tr.stats["real"] == 3


def test_ideal_network_costs_nothing():
    s = Session(build_cluster("hgx-h100", nodes=2))
    tr = Traffic(s, ideal=True)
    op = tr.collective("all_reduce", [0, 8], 1 << 30, "float32")
    send = tr.send([0], [8], 1 << 30)
    s.run()
    assert op.processed and send.processed and s.now == 0.0
