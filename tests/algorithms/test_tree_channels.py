"""A tree's channels for small buffers, by protocol, as NCCL drops them (issue 25: LL trees were flat at 80.31 us
from 128 to 512 KiB on 2 x 8 H100s, because Simple's 32 KiB per channel was applied to LL)."""
import pytest

from simcomm.algorithms.plan import Collective
from simcomm.algorithms.tree_shape import MIN_CHANNEL_BYTES, tree_channels
from simcomm.hardware import build_cluster
from simcomm.session import Session
from simcomm.workloads import run_perf


def test_nccl_per_channel_minimum_by_protocol():
    assert MIN_CHANNEL_BYTES == {"LL": 4096, "LL128": 5120, "Simple": 32768}  # threads x bytes per thread
    c = build_cluster("hgx-h100", nodes=2)
    coll = Collective("all_reduce", list(range(16)), (64 << 10) // 4).placed(c)
    assert [tree_channels(coll, 2, 8, p) for p in ("LL", "LL128", "Simple")] == [8, 7, 1]


def test_ll_tree_time_rises_once_every_channel_is_in_use():
    sizes = [16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10]
    rows = run_perf(Session(build_cluster("hgx-h100", nodes=2), detail="steps"), ["all_reduce"], sizes, ranks=16,
                    algorithms=["tree"], protocol="LL")
    t = [r.time for r in rows]
    assert t[0] == pytest.approx(t[1]) == pytest.approx(t[2])  # channels grow with the buffer: NCCL's flat stretch
    assert t[2] < t[3] < t[4] < t[5]  # all 16 channels busy from 64 KiB: more bytes, more time
