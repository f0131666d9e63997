"""Calibration profiles: a preset plus figures in a file, accepted wherever a preset name is."""
import pytest

from simcomm.collective import simulate_collective
from simcomm.hardware import HardwareError, Tuning, build_cluster, load_profile, write_profile


def test_round_trip_and_build(tmp_path):
    path = write_profile(tmp_path / "host.yaml", "cpu-host",
                         params={"host_bandwidth": 3e9, "ranks_per_node": 3},
                         overrides={"loopback_bandwidth": 2e9, "loopback_latency": 1e-5},
                         tuning=Tuning(2e-5, 5e-6, (("ring", 0.9),), ("test",)), fit={"points": 3})
    prof = load_profile(path)
    assert prof.preset == "cpu-host" and prof.params["host_bandwidth"] == 3e9 and prof.fit == {"points": 3}
    assert prof.tuning.launch_overhead == 2e-5 and prof.tuning.factor("ring", "Simple") == 0.9
    c = build_cluster(str(path))
    assert c.ranks_per_node == 3 and c.name == "cpu-host [host]"
    assert c.template.tuning.step_overhead == 5e-6
    assert sorted({k for k in c.link_kind}) == ["host", "loopback", "pcie"]
    assert build_cluster(str(path), overrides={"loopback_bandwidth": 1e9}).link_capacity.min() == 1e9


def test_tuning_changes_the_simulated_time(tmp_path):
    plain = simulate_collective("all_reduce", 1 << 20, cluster="cpu-host", ranks=4).time
    path = write_profile(tmp_path / "slow.yaml", "cpu-host", tuning=Tuning(launch_overhead=1e-3))
    tuned = simulate_collective("all_reduce", 1 << 20, cluster=build_cluster(path), ranks=4).time
    assert tuned - plain == pytest.approx(1e-3, rel=1e-6)
    shared = write_profile(tmp_path / "shared.yaml", "cpu-host", params={"host_bandwidth": 1e9})
    big = 64 << 20
    narrow = simulate_collective("all_gather", big, cluster=build_cluster(shared), ranks=4).time
    assert narrow > 2 * simulate_collective("all_gather", big, cluster="cpu-host", ranks=4).time


def test_chunk_overhead_and_first_touch_rate_round_trip_and_are_written_only_when_set(tmp_path):
    path = write_profile(tmp_path / "h.yaml", "hgx-h100", tuning=Tuning(1e-5, chunk_overhead=9000.0))
    assert load_profile(path).tuning.chunk_overhead == 9000.0
    assert build_cluster(str(path)).template.tuning.chunk_overhead == 9000.0
    write_profile(tmp_path / "c.yaml", "cpu-host", tuning=Tuning(1e-5))
    assert "chunk_overhead" not in (tmp_path / "c.yaml").read_text()
    units = tmp_path / "u.yaml"
    units.write_text("preset: hgx-h100\ntuning: {chunk_overhead: 8 KiB}\n")
    assert load_profile(units).tuning.chunk_overhead == 8192
    units.write_text("preset: cpu-host\ntuning: {first_touch_rate: 2GB/s, cores: 2}\n")
    assert load_profile(units).tuning.first_touch_rate == 2e9
    path = write_profile(tmp_path / "t.yaml", "cpu-host", tuning=Tuning(first_touch_rate=1.5e9))
    assert load_profile(path).tuning.first_touch_rate == 1.5e9
    units.write_text("preset: hgx-h100\ntuning: {chunk_overhead: lots}\n")
    with pytest.raises(HardwareError, match="chunk_overhead"):
        load_profile(units)


def test_unit_strings_and_errors(tmp_path):
    p = tmp_path / "u.yml"
    p.write_text("preset: cpu-host\noverrides: {loopback_bandwidth: 2GB/s, loopback_latency: 12us}\n"
                 "tuning: {launch_overhead: 30us}\n")
    prof = load_profile(p)
    assert prof.overrides == {"loopback_bandwidth": 2e9, "loopback_latency": 12e-6}
    assert prof.tuning.launch_overhead == pytest.approx(30e-6)
    bad = tmp_path / "bad.yaml"
    for text, msg in [("nope: 1\n", "needs 'preset"), ("preset: cpu-host\ncolour: red\n", "unknown key.*colour"),
                      ("preset: cpu-host\noverrides: {loopback_bandwidth: fast}\n", "loopback_bandwidth"),
                      ("preset: cpu-host\ntuning: {efficiency: {ring: 0}}\n", "efficiency ring"),
                      ("preset: cpu-host\nparams: {colour: 1}\n", "takes no parameter")]:
        bad.write_text(text)
        with pytest.raises(HardwareError, match=msg):
            build_cluster(str(bad))
    with pytest.raises(HardwareError, match="cannot read profile"):
        build_cluster(str(tmp_path / "missing.yaml"))


def test_interference_and_nccl_channel_bounds_round_trip_and_are_checked(tmp_path):
    path = write_profile(tmp_path / "h100.yaml", "hgx-h100",
                         tuning=Tuning(interference=False, min_channels=8, max_channels=16))
    text = path and open(path).read()
    assert "interference: false" in text and "max_channels: 16" in text
    t = build_cluster(str(path)).template.tuning
    assert (t.interference, t.min_channels, t.max_channels) == (False, 8, 16)
    assert "interference" not in open(write_profile(tmp_path / "plain.yaml", "hgx-h100")).read()
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: hgx-h100\ntuning: {max_channels: 100}\n")
    with pytest.raises(HardwareError, match="tuning.max_channels"):
        load_profile(bad)
    bad.write_text("preset: hgx-h100\ntuning: {interference: maybe}\n")
    with pytest.raises(HardwareError, match="tuning.interference"):
        load_profile(bad)
