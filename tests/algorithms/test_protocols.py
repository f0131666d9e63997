"""NCCL's protocols: NVLS's chunk schedule and what a chunk costs; on CPU ranks, gloo's fresh all_gather output."""
from dataclasses import replace

import pytest

from simcomm.algorithms.protocols import fresh_output_time, nvls_chunk, protocol
from simcomm.collective import simulate_collective
from simcomm.hardware import Tuning, build_cluster, get_preset

MIB, KIB = 1 << 20, 1 << 10


@pytest.mark.parametrize("size, chunk", [(MIB, 16), (8 * MIB - 1, 16), (8 * MIB, 32), (64 * MIB - 1, 32),
                                         (64 * MIB, 64), (1024 * MIB - 1, 64), (1024 * MIB, 128), (16 << 30, 128)])
def test_nvls_chunk_doubles_at_8_64_and_1024_mib_with_8_gpus(size, chunk):
    assert nvls_chunk(size, 8) == chunk * KIB


def test_nvls_chunk_thresholds_scale_with_the_heads():
    # 16 channels x 4 heads: half the concurrent ops of 8 GPUs, so every step comes at half the size
    assert [nvls_chunk(s, 4) // KIB for s in (4 * MIB - 1, 4 * MIB, 32 * MIB, 512 * MIB)] == [16, 32, 64, 128]
    assert nvls_chunk(0, 0) == 16 * KIB


def test_chunk_overhead_scales_only_nvls_bandwidth():
    t = Tuning(chunk_overhead=16 * KIB)
    for size, chunk in ((MIB, 16), (2 << 30, 128)):
        nvls = protocol("Simple", "nvls", tuning=t, nbytes=size, heads=8)
        assert nvls.efficiency == pytest.approx(chunk / (chunk + 16))
    ring = protocol("Simple", "ring", tuning=t, nbytes=MIB, heads=8)
    assert ring.efficiency == protocol("Simple", "ring", tuning=Tuning(), nbytes=MIB, heads=8).efficiency == 1.0
    assert protocol("Simple", "nvls", tuning=Tuning(), nbytes=MIB, heads=8).efficiency == 1.0
    with pytest.raises(Exception, match="chunk_overhead"):
        Tuning(chunk_overhead=-1.0)


def _nvls_busbw(cluster, size):
    r = simulate_collective("all_reduce", size, cluster=cluster, ranks=8, algorithm="nvls")
    return size / r.time * 2 * 7 / 8


def test_simulated_nvls_bandwidth_steps_up_where_the_chunk_doubles():
    base = get_preset("hgx-h100").builder().tuning
    plain = build_cluster("hgx-h100", tuning=replace(base, chunk_overhead=0.0))
    chunked = build_cluster("hgx-h100", tuning=replace(base, chunk_overhead=10e3))
    below, at = 1024 * MIB - 8 * MIB, 1024 * MIB
    jump = _nvls_busbw(chunked, at) / _nvls_busbw(chunked, below)
    # from 64 to 128 KiB chunks at 10 kB each: (131 / 141) / (65.5 / 75.5) = 1.071 times the bandwidth
    assert jump == pytest.approx((128 * KIB / (128 * KIB + 10e3)) / (64 * KIB / (64 * KIB + 10e3)), rel=0.005)
    assert _nvls_busbw(plain, at) / _nvls_busbw(plain, below) == pytest.approx(1.0, abs=0.01)


def test_gloo_all_gather_pays_for_its_fresh_output_from_32_mib():
    t = Tuning(cores=2, first_touch_rate=2e9)
    assert fresh_output_time("all_gather", 32 * MIB - 1, 2, t) == 0.0  # malloc reuses its heap below
    assert fresh_output_time("all_gather", 64 * MIB, 2, t) == pytest.approx(64 * MIB / 2e9)
    assert fresh_output_time("all_gather", 64 * MIB, 4, t) == pytest.approx(2 * 64 * MIB / 2e9)  # 4 ranks, 2 cores
    assert fresh_output_time("all_reduce", 64 * MIB, 2, t) == 0.0
    assert fresh_output_time("all_gather", 64 * MIB, 2, Tuning(cores=2)) == 0.0  # no rate: not charged
    plain = protocol("Simple", device_kind="cpu", tuning=Tuning(launch_overhead=1e-5), kind="all_gather",
                     ranks=2, nbytes=64 * MIB)
    touched = protocol("Simple", device_kind="cpu", tuning=Tuning(launch_overhead=1e-5, cores=2,
                                                                   first_touch_rate=2e9),
                       kind="all_gather", ranks=2, nbytes=64 * MIB)
    assert touched.base_latency - plain.base_latency == pytest.approx(64 * MIB / 2e9)
    with pytest.raises(Exception, match="first_touch_rate"):
        Tuning(first_touch_rate=-1.0)


def test_simulated_gloo_all_gather_steps_up_at_32_mib():
    host = build_cluster("cpu-host", tuning=Tuning(cores=2, first_touch_rate=2e9))
    plain = build_cluster("cpu-host", tuning=Tuning(cores=2))
    for size in (16 * MIB, 32 * MIB - 4096):
        a = simulate_collective("all_gather", size, cluster=host, ranks=2).time
        assert a == simulate_collective("all_gather", size, cluster=plain, ranks=2).time
    at = 32 * MIB
    extra = simulate_collective("all_gather", at, cluster=host, ranks=2).time - \
        simulate_collective("all_gather", at, cluster=plain, ranks=2).time
    assert extra == pytest.approx(at / 2e9, rel=1e-9)
