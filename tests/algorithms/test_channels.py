"""Channels (CTAs per GPU) of a collective's kernel, as NCCL picks them (algorithms/channels.py)."""
import numpy as np
import pytest

from simcomm.algorithms.channels import collective_channels, communicator_channels, p2p_channels
from simcomm.algorithms.plan import Collective
from simcomm.hardware import build_cluster

H100, H100X2, A100X2 = (build_cluster("hgx-h100"), build_cluster("hgx-h100", nodes=2),
                        build_cluster("dgx-a100", nodes=2))


def coll(kind, n, nbytes, dtype="float32"):
    size = np.dtype(dtype).itemsize
    count = nbytes // size // (n if kind in ("all_gather", "reduce_scatter", "all_to_all") else 1)
    return Collective(kind, np.arange(n), count, np.dtype(dtype))


def test_communicators_get_the_topology_searchs_channels():
    assert communicator_channels(H100, 1) == 32  # 2 per NVLink (18), at most MAXCHANNELS
    assert communicator_channels(H100X2, 2) == 16  # 2 per NIC rail
    assert communicator_channels(build_cluster("dgx-a100"), 1) == 24  # 12 NVLinks
    assert communicator_channels(build_cluster("aws-p4de", nodes=2), 2) == 8  # 4 EFA NICs
    assert communicator_channels(build_cluster("cpu-host"), 1) == 0  # gloo: no SMs


def test_nccl_min_and_max_nchannels_bound_them():
    low = build_cluster("hgx-h100", tuning_changes={"max_channels": 8})
    high = build_cluster("hgx-h100", nodes=2, tuning_changes={"min_channels": 24})
    assert communicator_channels(low, 1) == 8 and communicator_channels(high, 2) == 24
    assert collective_channels(low, coll("all_reduce", 8, 1 << 30), "ring", "Simple") == 8


@pytest.mark.parametrize("nbytes, protocol, algorithm, expect", [
    (1 << 30, "Simple", "ring", 32),  # large: every channel
    (1 << 20, "Simple", "ring", 32),  # 32 channels x 512 threads x 64 B = 1 MiB
    (256 << 10, "Simple", "ring", 8),
    (4 << 10, "Simple", "ring", 1),
    (64 << 10, "LL128", "ring", 12),  # 640 threads x 8 B = 5 KiB per channel
    (64 << 10, "LL", "ring", 2),  # the ring's LL threshold grows with the ranks: 8 x 8 B x 512
    (64 << 10, "LL", "tree", 16),
    (1 << 30, "Simple", "nvls", 16),  # NVLS's own channels
    (1 << 10, "Simple", "nvls", 16),
])
def test_small_buffers_use_fewer_channels(nbytes, protocol, algorithm, expect):
    assert collective_channels(H100, coll("all_reduce", 8, nbytes), algorithm, protocol) == expect


def test_point_to_point_uses_its_own_channels():
    assert p2p_channels(H100X2, True, 1 << 30) == 2  # NCCL_NCHANNELS_PER_NET_PEER
    assert p2p_channels(H100X2, True, 100 << 10) == 1  # one 128 KiB chunk
    assert p2p_channels(H100, False, 1 << 30) == 32
    assert p2p_channels(H100, False, 1 << 20) == 2  # two 512 KiB NVLink chunks
    assert collective_channels(H100X2, coll("all_to_all", 16, 1 << 30), "direct", "Simple") == 16
    assert collective_channels(build_cluster("cpu-host"), coll("all_reduce", 4, 1 << 20), "ring", "Simple") == 0
