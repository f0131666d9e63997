"""simcomm calibrate (gloo): measuring, fitting on some points and judging on the others, the profile it writes."""
import json
import re

import numpy as np
import pytest

import simcomm
from simcomm.backends.calibrate import Measurement, Observation, calibrate_gloo, measure_gloo, predict
from simcomm.backends.calibrate.gloo import default_space, observations, split
from simcomm.cli import main
from simcomm.collective import simulate_collective
from simcomm.distributed import api as dist
from simcomm.hardware import build_cluster, load_profile

SIZES = [4096 * 4 ** k for k in range(8)]
TRUE = {"overrides.loopback_bandwidth": 3e9, "params.host_bandwidth": 4e9, "overrides.loopback_latency": 2e-5,
        "overrides.memory_bandwidth": 6e9, "tuning.launch_overhead": 3e-5, "tuning.step_overhead": 1e-5,
        "tuning.efficiency.all_gather": 0.5}


def synthetic(noise=()):
    """What a host described by TRUE would measure (optionally scaled per point by noise factors)."""
    space = default_space(cores=2).with_values(TRUE)
    pts = [(k, n, s) for n in (2, 3, 4) for k in ("all_reduce", "all_gather", "broadcast") for s in SIZES]
    pts += [("sendrecv", 2, s) for s in SIZES]
    times = predict(space, observations([Measurement(k, n, s, 1.0) for k, n, s in pts]))
    scale = list(noise) + [1.0] * len(pts)
    return [Measurement(k, n, s, t * f, [t * f]) for (k, n, s), t, f in zip(pts, times, scale)]


def test_split_holds_back_three_ranks_and_the_sizes_between():
    train, held = split(synthetic())
    assert {m.ranks for m in held if m.collective != "sendrecv"} == {2, 3, 4}
    assert all(m.ranks in (2, 4) for m in train if m.collective != "sendrecv")
    assert {m.size for m in train if m.collective == "all_reduce"} == {4096, 65536, 1 << 20, 16 << 20, 64 << 20}
    assert not {(m.collective, m.ranks, m.size) for m in train} & {(m.collective, m.ranks, m.size) for m in held}


def test_fit_recovers_a_known_host(tmp_path):
    cal = calibrate_gloo([synthetic()], str(tmp_path / "p.yaml"), sweeps=2, steps=10)
    assert cal.median_abs(held_back=True) < 0.05  # the model can describe its own kind of host
    assert cal.median_abs(held_back=True, after=False) > 0.3  # the default cpu-host preset cannot
    prof = load_profile(tmp_path / "p.yaml")
    assert prof.preset == "cpu-host" and prof.tuning.cores == 2
    assert prof.fit["median_abs_error_held_back_after"] == pytest.approx(cal.median_abs(True))
    c = build_cluster(str(tmp_path / "p.yaml"), ranks_per_node=4)
    t = simulate_collective("all_reduce", 1 << 20, cluster=c, ranks=4).time
    m = next(p for p in cal.points if (p.collective, p.ranks, p.size) == ("all_reduce", 4, 1 << 20))
    assert t == pytest.approx(m.after, rel=1e-9)


def test_the_ping_pong_is_predicted_as_one_send_of_a_rank_program():
    space = default_space(cores=2).with_values(TRUE)
    cluster = space.cluster(2, 1)
    size = 64 << 20
    (half,) = predict(space, observations([Measurement("sendrecv", 2, size, 1.0)]))

    def one_way(rank):
        buf = np.zeros(size // 4, dtype=np.float32)
        t0 = simcomm.clock.time()
        dist.send(buf, 1) if rank == 0 else dist.recv(buf, 0)
        return simcomm.clock.time() - t0
    sent = simcomm.spawn(one_way, nprocs=2, cluster=cluster).results[1]
    assert half == pytest.approx(sent, rel=1e-9)
    # one message runs at the loopback's rate (3 GB/s); nccl-tests' sendrecv has both ranks sending at once,
    # sharing the host's 4 GB/s copy bandwidth (2 GB/s each)
    (both,) = predict(space, [Observation("sendrecv", 2, size, 1.0)])
    assert both / half == pytest.approx(3e9 / 2e9, rel=0.01)


def test_noise_is_reported_per_pass():
    a, b = synthetic(), synthetic(noise=[1.5] * 10)
    cal = calibrate_gloo([a, b], sweeps=1, steps=2)
    noise = cal.noise()
    assert noise["max_pass_difference"] == pytest.approx(0.5) and noise["median_pass_difference"] == 0.0
    assert all(len(p.passes) == 2 and p.measured == min(p.passes) for p in cal.points)


def test_cli_from_saved_measurements(tmp_path, capsys):
    saved = tmp_path / "m.json"
    saved.write_text(json.dumps({"passes": [{"points": [m.__dict__ for m in synthetic()]}]}))
    out = tmp_path / "host.yaml"
    assert main(["calibrate", "--measurements", str(saved), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "median |error|  held back: before" in text and f"wrote profile: {out}" in text
    assert re.search(r"held back by collective \(ranks\): all_gather [\d.]+% \(2\), [\d.]+% \(3\), [\d.]+% \(4\); "
                     r"all_reduce .*; broadcast [\d.]+% \(2\), [\d.]+% \(3\), [\d.]+% \(4\)\n", text)
    assert main(["perf", "all_reduce", "-b", "1M", "-e", "1M", "-g", "4", "--cluster", str(out)]) == 0
    assert "all_reduce" in capsys.readouterr().out


def test_measuring_real_gloo():
    ms = measure_gloo([4096, 1 << 20], world_sizes=(2,), rounds=2, budget=0.002)
    kinds = {(m.collective, m.size) for m in ms}
    assert ("sendrecv", 4096) in kinds and ("all_gather", 1 << 20) in kinds and len(ms) == 8
    assert all(m.time > 0 and len(m.rounds) == 2 and m.time == min(m.rounds) for m in ms)


def test_cli_pools_the_passes_of_several_files(tmp_path, capsys):
    slow = [Measurement(m.collective, m.ranks, m.size, m.time * 1.5, [m.time * 1.5]) for m in synthetic()]
    for name, ms in (("a.json", synthetic()), ("b.json", slow)):
        (tmp_path / name).write_text(json.dumps({"passes": [{"points": [m.__dict__ for m in ms]}]}))
    assert main(["calibrate", "--measurements", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["noise"]["median_pass_difference"] == pytest.approx(0.5)
    assert all(p["measured"] == min(p["passes"]) and len(p["passes"]) == 2 for p in doc["points"])


@pytest.mark.parametrize("text, expected", [
    ("[1, 2]", "expected a JSON object with a non-empty list 'passes'"),
    ('{"passes": [{"points": [{"collective": "all_reduce"}]}]}', "passes[0]: expected 'points', each with"),
    ("{not json", "cannot read measurements"),
])
def test_cli_names_a_bad_measurements_file(tmp_path, capsys, text, expected):
    bad = tmp_path / "m.json"
    bad.write_text(text)
    assert main(["calibrate", "--measurements", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and expected in err and "Traceback" not in err
