"""Link usage: links ranked by utilisation, not bytes (issue 11: a 99.6% spine link ranked 64th by bytes)."""
from simcomm.hardware import build_cluster
from simcomm.report.links import link_usage
from simcomm.session import Session
from simcomm.workloads.perf import run_perf


def test_links_are_ranked_by_utilisation():
    c = build_cluster("hgx-h100", nodes=2)
    session = Session(c, detail="flows")
    run_perf(session, ["all_reduce"], [1 << 26], algorithms=["ring"])
    usage = link_usage(session.sim.recorder.activities(), c)
    util = [u.nbytes / u.capacity for u in usage]
    assert util == sorted(util, reverse=True) and len(usage) > 10
    by_bytes = sorted(usage, key=lambda u: -u.nbytes)
    assert by_bytes[0].capacity > usage[0].capacity  # the fast NVLink links carry the most bytes, NICs are busiest
