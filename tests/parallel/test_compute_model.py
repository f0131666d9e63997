"""The compute model is fitted to the measured H100 table, states its error there, and extrapolates by stated rules."""
import numpy as np
import pytest

from simcomm.errors import SimcommError
from simcomm.hardware.presets import A100_SXM, CPU_PROC, H100_SXM, H200_SXM
from simcomm.parallel import compute_model as cm
from simcomm.parallel.calibration import ATTENTION_US, GEMM_US, MEMORY_OP_US


def test_the_stored_constants_are_the_fit_of_the_measurements():
    fresh = cm.refit()
    for key in ("gemm", "attention_forward", "attention_backward"):
        assert np.allclose(fresh[key], cm.FITTED[key], rtol=1e-4, atol=1e-15), key
    for cls, (eff, t0) in fresh["memory"].items():
        assert cm.FITTED["memory"][cls] == pytest.approx((eff, t0), rel=1e-4, abs=1e-9)


def test_gemm_error_on_the_measured_shapes():
    err = cm.gemm_fit_error()
    assert err["points"] == len(GEMM_US) == 85
    assert err["mean_abs"] < 0.07 and err["max_abs"] < 0.21
    assert err["worst_shape"] == (1024, 1024, 1024)  # the smallest product, where launch cost dominates
    # not one constant: the fitted rate spans the measured range (small thin products to large squares)
    m = cm.ComputeModel(H100_SXM)
    rates = [2 * a * b * c / m.gemm(a, b, c) / 1e12 for a, b, c, _ in GEMM_US]
    assert min(rates) < 350 and max(rates) > 700


def test_gemm_rate_depends_on_shape_not_only_on_flops():
    m = cm.ComputeModel(H100_SXM)
    short_k, long_k = (2 * x * y * z / m.gemm(x, y, z) for x, y, z in [(8192, 8192, 512), (2048, 2048, 8192)])
    assert short_k < 0.85 * long_k  # the same 2^36 FLOPs, a different rate
    assert m.gemm(8192, 8192, 8192) == pytest.approx(1446.4e-6, rel=0.1)
    assert m.gemm(0, 10, 10) == 0.0


def test_attention_and_memory_ops_match_their_rows():
    err = cm.attention_fit_error()
    assert err["points"] == len(ATTENTION_US)
    assert err["forward_mean_abs"] < 0.05 and err["backward_mean_abs"] < 0.2
    mem = cm.memory_fit_error()
    assert mem["norm"] < 0.08 and mem["elementwise"] < 0.02 and mem["softmax"] < 0.45  # softmax varies with rows
    assert len(MEMORY_OP_US) == 9


def test_other_gpus_scale_by_their_best_matmul_rate():
    h100, a100, h200 = (cm.ComputeModel(d) for d in (H100_SXM, A100_SXM, H200_SXM))
    big = (16384, 16384, 16384)
    assert a100.gemm(*big) / h100.gemm(*big) == pytest.approx(794.5 / 271.2, rel=0.02)
    assert h200.gemm(*big) == h100.gemm(*big)  # the same tensor cores
    assert h200.memory(1e9) < h100.memory(1e9)  # faster HBM
    assert (a100.peak, h100.peak) == (312e12, 989.4e12)
    fp8 = cm.ComputeModel(H100_SXM, fp8=True)
    assert h100.gemm(*big) / fp8.gemm(*big) == pytest.approx(1402.6 / 794.5, rel=0.02)
    with pytest.raises(SimcommError, match="no FP8"):
        cm.ComputeModel(A100_SXM, fp8=True)


def test_an_unknown_device_is_scaled_and_says_so():
    m = cm.ComputeModel(CPU_PROC)
    assert "no measured GPU figures" in m.note and m.peak == CPU_PROC.compute_rate
