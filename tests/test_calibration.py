"""The built-in presets against the public nccl-tests tables (calibration/): the figures presets.py carries are the
ones calibration/fit_presets.py fitted, and with them `simcomm compare` stays within the targets per system:
geometric-mean |error| under 10% at >= 64 MiB and under 20% at 1-64 MiB. Systems with a `known_gap` (the
multi-node ones) do not meet them; they are held to the levels they reach today, so they cannot silently worsen.
With the fitted figures the tuner still picks what simulates fastest."""
from pathlib import Path

import numpy as np
import pytest
import yaml

from simcomm.algorithms import Collective, choose
from simcomm.backends.compare_log import compare_table, gm_abs_error
from simcomm.backends.nccl_log import read_log
from simcomm.hardware import build_cluster, get_preset
from simcomm.session import Session

CAL = Path(__file__).resolve().parents[1] / "calibration"
SYSTEMS = yaml.safe_load((CAL / "systems.yaml").read_text())["systems"]
FITTED = yaml.safe_load((CAL / "fitted.yaml").read_text())


@pytest.mark.parametrize("preset", sorted(FITTED))
def test_presets_carry_the_fitted_figures(preset):
    t = get_preset(preset).builder().tuning
    want = FITTED[preset]
    assert t.launch_overhead == pytest.approx(want["launch_overhead"], rel=1e-6)
    assert t.step_overhead == pytest.approx(want["step_overhead"], rel=1e-6)
    assert dict(t.efficiency) == pytest.approx(want["efficiency"], rel=1e-6)
    assert any("fit_presets.py" in s for s in t.sources)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_default_presets_match_the_measurements(name):
    s = SYSTEMS[name]
    points = []
    for sw in s["sweeps"]:
        (table,) = read_log(CAL / "nccl-tests" / f"{sw['log']}.log")
        cmp = compare_table(table, s["preset"], nodes=s.get("nodes"), collective=sw["collective"],
                            ranks=sw["ranks"], algorithm=sw.get("algo"))
        points += cmp.points
    big = [p for p in points if p.size >= 64 << 20]
    mid = [p for p in points if (1 << 20) <= p.size < 64 << 20]
    # Multi-node 1-64 MiB: the tuner picks what simulates fastest, LL up to 32 MiB across nodes, which the
    # simulation runs without NCCL's llMaxBw cap and so faster than NCCL does (p5 41.5%, 10 nodes 55.5%).
    limit_big, limit_mid = (0.20, 0.60) if "known_gap" in s else (0.10, 0.20)
    assert gm_abs_error(big) < limit_big, f"{name}: >= 64 MiB geometric-mean |error| {gm_abs_error(big):.1%}"
    if mid:
        assert gm_abs_error(mid) < limit_mid, f"{name}: 1-64 MiB geometric-mean |error| {gm_abs_error(mid):.1%}"


@pytest.mark.parametrize("preset, nic", [("hgx-h100", 25e9), ("hgx-h100", None), ("dgx-a100", None)])
@pytest.mark.parametrize("size", [1 << 20, 64 << 20, 1 << 30])
def test_the_tuner_picks_what_simulates_fastest(preset, nic, size):
    """Issue 11: with the fitted presets (hgx-h100's tree at 0.3852 of NCCL's figure, dgx-a100's at 0.8008) the
    tuner charged the tree NCCL's 2 x size / (0.92 x busBw) while the simulated tree sends 2 (ppn-1)/ppn of the
    size over each NVLink port; the ring's latency, which the simulation hides behind its lockstep transfers, in
    full; and LL NCCL's llMaxBw, which the simulation does not apply. 2 x dgx-a100 at 1 GiB: ring chosen (181
    GB/s busbw) while the tree simulated 202. Every (algorithm, protocol) the tuner weighed is simulated here; the
    one it chose must be within 5% of the fastest, and its prediction within 10% of its simulated time."""
    cluster = build_cluster(preset, nodes=2, overrides={"nic_bandwidth": nic} if nic else None)
    n = cluster.num_ranks
    choice = choose(cluster, Collective("all_reduce", np.arange(n), size // 4))
    simulated = {}
    for algorithm, protocol, _ in choice.weighed:
        s = Session(cluster, detail="steps")
        op = s.collective("all_reduce", range(n), size, algorithm=algorithm, protocol=protocol)
        s.run(op)
        simulated[algorithm, protocol] = op.record.time
    chosen = simulated[choice.algorithm, choice.protocol]
    assert chosen <= 1.05 * min(simulated.values()), (choice.algorithm, choice.protocol, simulated)
    assert choice.predicted == pytest.approx(chosen, rel=0.10)
