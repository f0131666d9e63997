"""The built-in presets against the public nccl-tests tables (calibration/): the figures presets.py carries are the
ones calibration/fit_presets.py fitted, and with them `simcomm compare --systems calibration/systems.yaml` (the same
code, backends.compare_systems) stays within the targets per system: geometric-mean |error| over the system's
modelled sweeps under 10% at >= 64 MiB and under 20% at 1-64 MiB. Systems with a `known_gap` (p5 on AWS EFA,
the 10-node H100 cluster and the two 8x A100 tables that disagree) do not meet them,
and sweeps with a `known_gap` are scored apart: both are held to the levels they reach today (HELD, GAPS_HELD), so
they cannot silently worsen.
With the fitted figures the tuner still picks what simulates fastest."""
from pathlib import Path

import numpy as np
import pytest
import yaml

from simcomm.algorithms import Collective, choose
from simcomm.backends.compare_systems import compare_systems, load_systems
from simcomm.collective import simulate_collective
from simcomm.hardware import build_cluster, get_preset
from simcomm.session import Session

CAL = Path(__file__).resolve().parents[1] / "calibration"
SYSTEMS_FILE = CAL / "systems.yaml"
SYSTEMS = load_systems(SYSTEMS_FILE)[0]
FITTED = yaml.safe_load((CAL / "fitted.yaml").read_text())
TARGETS = {"1-64 MiB": 0.20, ">= 64 MiB": 0.10}
# system -> band -> the level it reaches with the fitted presets (docs/validation.md), rounded up
HELD = {"h100-10node": {"1-64 MiB": 0.55, ">= 64 MiB": 0.10},
        "a100-azure": {"1-64 MiB": 0.23, ">= 64 MiB": 0.07},
        "a100-stas00": {"1-64 MiB": 0.21, ">= 64 MiB": 0.07}}
GAPS_HELD = 0.65  # known-gap sweeps: torch's overhead (31%), one GPU per node (36%; its 1 KiB points 62%)


@pytest.mark.parametrize("preset", sorted(FITTED))
def test_presets_carry_the_fitted_figures(preset):
    t = get_preset(preset).builder().tuning
    want = FITTED[preset]
    assert t.launch_overhead == pytest.approx(want["launch_overhead"], rel=1e-6)
    assert t.step_overhead == pytest.approx(want["step_overhead"], rel=1e-6)
    assert dict(t.efficiency) == pytest.approx(want["efficiency"], rel=1e-6)
    assert t.chunk_overhead == want.get("chunk_overhead", 0.0)  # NVLS's chunks: only presets with NVLS
    assert bool(t.chunk_overhead) == get_preset(preset).builder().nvls
    assert any("fit_presets.py" in s for s in t.sources)
    if "nic_latency" in want:  # a board on another network (EFA): the NICs' latency is fitted too
        assert get_preset(preset).builder().nic_latency == pytest.approx(want["nic_latency"], rel=1e-6)


def test_a_board_on_another_network_predicts_one_node_as_the_board_does():
    """aws-p5 is hgx-h100's board on EFA: the fit leaves every figure that acts inside one node at the board's, so
    a single p5 node predicts what a single HGX H100 does; across nodes they differ."""
    for board, efa in (("hgx-h100", "aws-p5"), ("dgx-a100", "aws-p4de")):
        one = [simulate_collective("all_reduce", size, cluster=build_cluster(p)).time
               for p in (board, efa) for size in (1 << 20, 1 << 30)]
        assert one[:2] == one[2:]
        two = [simulate_collective("all_reduce", 1 << 20, cluster=build_cluster(p, nodes=2)).time
               for p in (board, efa)]
        assert two[0] != two[1]


def test_every_system_with_a_known_gap_is_held():
    assert set(HELD) == {n for n, s in SYSTEMS.items() if "known_gap" in s}


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_default_presets_match_the_measurements(name):
    (sc,) = compare_systems(SYSTEMS_FILE, [name])
    limits = HELD.get(name, TARGETS)
    for band, err, sizes in sc.bands():
        if band in limits:
            assert err < limits[band], f"{name}: {band} geometric-mean |error| {err:.1%} over {sizes} sizes"
    for band, err, sizes in sc.bands(gaps=True):
        assert err < GAPS_HELD, f"{name}: known-gap sweeps, {band}: {err:.1%} over {sizes} sizes"
    assert sc.sweeps or sc.gaps


@pytest.mark.parametrize("preset, nic", [("hgx-h100", 25e9), ("hgx-h100", None), ("dgx-a100", None)])
@pytest.mark.parametrize("size", [1 << 20, 64 << 20, 1 << 30])
def test_the_tuner_picks_what_simulates_fastest(preset, nic, size):
    """Issue 11: with the fitted presets (hgx-h100's tree at 0.3852 of NCCL's figure, dgx-a100's at 0.8008) the
    tuner charged the tree NCCL's 2 x size / (0.92 x busBw) while the simulated tree sends 2 (ppn-1)/ppn of the
    size over each NVLink port; the ring's latency, which the simulation hides behind its lockstep transfers, in
    full; and LL NCCL's llMaxBw, which the simulation did not apply then. 2 x dgx-a100 at 1 GiB: ring chosen (181
    GB/s busbw) while the tree simulated 202. Every (algorithm, protocol) the tuner weighed is simulated here (NVLS-Tree
    and LL held to llMaxBw included); the one it chose must be within 5% of the fastest, and its prediction within
    10% of its simulated time."""
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
