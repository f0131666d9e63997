"""The algorithm laws here are NCCL's own formulas (its tuner's figures); the presets' fitted software figures
(hardware.Tuning, calibration/) are checked against measurements in tests/test_calibration.py instead."""
import pytest

from simcomm.hardware import presets


@pytest.fixture(autouse=True)
def _nccl_figures(monkeypatch):
    monkeypatch.setattr(presets, "FITTED_TUNING", {})
