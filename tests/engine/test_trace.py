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


def test_a_sends_flows_read_back_as_one_p2p_record_per_flow():
    """Recorder.sends keeps a send's flows as one entry; the timeline has the records op() would have made."""
    from simcomm import build_cluster
    from simcomm.engine import Recorder
    cluster = build_cluster("hgx-h100")
    tags = {"axis": "pp"}
    batched, one_by_one = Recorder(cluster, "steps"), Recorder(cluster, "steps")
    src, dst, ends, nbytes = np.array([0, 1]), np.array([2, 3]), np.array([2.0, 2.5]), np.array([8.0, 16.0])
    for label in ("", "pp send"):
        batched.sends(src, dst, 1.0, ends, nbytes, label, tags)
        for s, d, e, b in zip(src.tolist(), dst.tolist(), ends.tolist(), nbytes.tolist()):
            one_by_one.op(s, "p2p", 1.0, e, b, label or f"send {s}->{d}", d, tags)
    got, want = batched.activities(), one_by_one.activities()
    assert got == want and len(got) == 4
    assert {a.label for a in got} == {"send 0->2", "send 1->3", "pp send"}
    assert all(a.tags == tags and a.kind == "p2p" for a in got)
