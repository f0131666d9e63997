"""The built-in presets against the public nccl-tests tables (calibration/): the figures presets.py carries are the
ones calibration/fit_presets.py fitted, and with them `simcomm compare` stays within the targets per system:
geometric-mean |error| under 10% at >= 64 MiB and under 20% at 1-64 MiB. Systems with a `known_gap` (the
multi-node ones) do not meet them; they are held to the levels they reach today, so they cannot silently worsen."""
from pathlib import Path

import pytest
import yaml

from simcomm.backends.compare_log import compare_table, gm_abs_error
from simcomm.backends.nccl_log import read_log
from simcomm.hardware import get_preset

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
    limit_big, limit_mid = (0.20, 0.40) if "known_gap" in s else (0.10, 0.20)
    assert gm_abs_error(big) < limit_big, f"{name}: >= 64 MiB geometric-mean |error| {gm_abs_error(big):.1%}"
    if mid:
        assert gm_abs_error(mid) < limit_mid, f"{name}: 1-64 MiB geometric-mean |error| {gm_abs_error(mid):.1%}"
