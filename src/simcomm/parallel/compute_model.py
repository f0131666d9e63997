"""How long a GPU takes for a GEMM, a flash-attention pass and a memory-bound op: models FITTED to measurements.

GEMM (M x K) @ (K x N), 2MNK FLOPs:  t = t0 + 2MNK / (peak * eff),  eff = e_max * s(M/c) * s(N/c) * s(K/k0),
s(x) = x / (1 + x), symmetric in M and N (a product and its transpose cost the same). Four parameters, fitted
(least squares on log time, Levenberg-Marquardt) to the 85 bf16 shapes measured on an H100 (calibration.py): the
rate depends on all three dimensions and saturates at e_max for large ones; t0 absorbs launch cost and the poor
utilisation of small products. Error on the measured points: `gemm_fit_error()` (mean |error| 6.7%, worst 21%,
at 1024^3); operand layout (NN/TN/NT, up to ~20% apart in the measurements) is not modelled.

Flash attention (causal): the same form with the work as b * heads * s (parallelism) and s (tile length), fitted
to the forward; the backward (2.5x the forward's FLOPs) shares its parallelism constant and launch cost and fits
its own e_max and sequence constant (`attention_fit_error()`: forward mean |error| 4%, backward 18%, dominated by
two rows at s=2048 where b=2 x 12 heads runs at half the rate of b=1; the model does not follow them).

Memory-bound ops: bytes / (HBM rate * efficiency of the op class) + a launch cost, per class (norm, elementwise,
softmax) fitted to the measured layernorm/gelu/softmax rows (`memory_fit_error()`: worst 7%, 1% and 41%; the
softmax rate depends on the row length, which the model ignores); the HBM rate is the simulated device's.

Range: the measured GEMMs have M, N >= 1024; the fit barely constrains the rate of thinner products (M or N of a
few hundred), which it likely overestimates.

Other GPUs (extrapolated, not measured here): GEMM and attention rates scale by the ratio of the GPU's best-shape
matmul rate (MAMF, stas00/ml-engineering) to the H100's; A100 (108 SMs) saturates at smaller shapes (c scaled
by sqrt(108/132)); H200 has the H100's compute (same GEMM model) and its own HBM rate. FP8 GEMMs scale
by the FP8/BF16 MAMF ratio; attention stays bf16. MFU uses the nominal dense bf16 peak of `GpuFigures`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import SimcommError
from .calibration import ATTENTION_US, COPY, GEMM_US, H100_BF16_PEAK, H100_SMS, MEMORY_OP_US
from .model.programs import ATTENTION, GEMM


@dataclass(frozen=True)
class GpuFigures:
    """Nominal and best-measured rates of one GPU model (stas00/ml-engineering accelerator tables)."""

    name: str
    bf16_peak: float  # dense, flop/s: the MFU denominator
    fp8_peak: float
    sms: int
    mamf_bf16: float  # maximum achievable matmul flop/s (best shape, brute force)
    mamf_fp8: float


H100 = GpuFigures("H100 SXM", H100_BF16_PEAK, 1979e12, H100_SMS, 794.5e12, 1402.6e12)
GPUS: dict[str, GpuFigures] = {
    "H100-SXM5-80GB": H100,
    "H200-SXM-141GB": GpuFigures("H200 SXM", H100_BF16_PEAK, 1979e12, 132, 794.5e12, 1453.4e12),
    "A100-SXM4-80GB": GpuFigures("A100 SXM", 312e12, 0.0, 108, 271.2e12, 0.0),
    # A100 PCIe: the SXM part's tensor cores at a lower power limit; no MAMF figure, the SXM one is used.
    "A100-PCIe-40GB": GpuFigures("A100 PCIe", 312e12, 0.0, 108, 271.2e12, 0.0),
}


def _sat(x):
    return x / (1.0 + x)


# ---- fitting ---------------------------------------------------------------------------------------------------
def levenberg_marquardt(residuals, p0, iterations: int = 200) -> np.ndarray:
    """Minimise sum(residuals(theta)^2) from p0 (deterministic; numeric Jacobian)."""
    theta = np.asarray(p0, dtype=float)
    r = residuals(theta)
    cost, lam = float(r @ r), 1e-3
    for _ in range(iterations):
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            step = np.zeros_like(theta)
            step[j] = 1e-6
            jac[:, j] = (residuals(theta + step) - r) / 1e-6
        a, g = jac.T @ jac, jac.T @ r
        improved = False
        while lam < 1e12:
            delta = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            r_new = residuals(theta + delta)
            c_new = float(r_new @ r_new)
            if c_new < cost:
                theta, r, lam, improved = theta + delta, r_new, lam / 3, True
                break
            lam *= 4
        if not improved or abs(cost - c_new) < 1e-14 * max(cost, 1e-30):
            cost = min(cost, c_new)
            break
        cost = c_new
    return theta


def gemm_time_h100(params, m, n, k):
    """Seconds for (m x k) @ (k x n) on the H100 with fitted (e_max, c, k0, t0)."""
    e_max, c, k0, t0 = params
    eff = e_max * _sat(m / c) * _sat(n / c) * _sat(k / k0)
    return t0 + 2.0 * m * n * k / (H100_BF16_PEAK * eff)


def fit_gemm(rows=GEMM_US) -> tuple[float, ...]:
    """Fit (e_max, c, k0, t0) to (M, N, K, us) rows, least squares on log time."""
    a = np.asarray(rows, dtype=float)
    m, n, k, t = a[:, 0], a[:, 1], a[:, 2], a[:, 3] * 1e-6

    def res(theta):
        return np.log(gemm_time_h100(np.exp(theta), m, n, k) / t)
    theta = levenberg_marquardt(res, np.log([0.76, 50.0, 240.0, 2.7e-5]))
    return tuple(float(x) for x in np.exp(theta))


def attention_time_h100(params, work, s, flops):
    """Seconds for `flops` of flash attention over `work` = b * heads * s rows and sequence s."""
    e, w0, s0, t0 = params
    return t0 + flops / (H100_BF16_PEAK * e * _sat(work / w0) * _sat(s / s0))


def _attention_rows():
    a = np.asarray(ATTENTION_US, dtype=float)
    b, hq, s, d = a[:, 0], a[:, 1], a[:, 3], a[:, 4]
    fwd_flops = 4 * b * hq * s * s * d / 2
    return b * hq * s, s, fwd_flops, a[:, 5] * 1e-6, (a[:, 6] - a[:, 5]) * 1e-6


def fit_attention() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(forward params, backward params) of the flash-attention model (backward FLOPs = 2.5x forward)."""
    work, s, fl, tf, tb = _attention_rows()
    theta = levenberg_marquardt(lambda th: np.log(attention_time_h100(np.exp(th), work, s, fl) / tf),
                                np.log([0.79, 3.2e4, 1.8e3, 4e-6]))
    e, w0, s0, t0 = np.exp(theta)

    def backward(th):
        eb, sb = np.exp(th)
        return np.log(attention_time_h100((eb, w0, sb, t0), work, s, 2.5 * fl) / tb)
    eb, sb = np.exp(levenberg_marquardt(backward, np.log([0.6, 2e3])))
    return (float(e), float(w0), float(s0), float(t0)), (float(eb), float(w0), float(sb), float(t0))


MEMORY_CLASSES = {"layernorm": "norm", "gelu": "elementwise", "softmax": "softmax"}


def fit_memory_ops() -> dict[str, tuple[float, float]]:
    """Per op class (norm, elementwise, softmax): (efficiency vs the copy rate, launch seconds), linear least
    squares of time on bytes over the measured rows; the copy rate is the measured 3.0 TB/s."""
    copy_rate = 2 * COPY[1][0] / (COPY[1][1] * 1e-6)  # a copy reads and writes every byte
    out = {}
    for measured, cls in MEMORY_CLASSES.items():
        rows = [(2.0 * 2 * tok * hid, us * 1e-6) for op, tok, hid, us in MEMORY_OP_US if op == measured]
        x, y = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        slope, icpt = np.polyfit(x, y, 1)
        if icpt < 0:  # a launch cost cannot be negative: fit through the origin instead
            slope, icpt = float(x @ y / (x @ x)), 0.0
        out[cls] = (float(1.0 / (slope * copy_rate)), float(icpt))
    return out


# The fit's result (`refit()` reproduces it from calibration.py; a test checks they agree), kept as constants so a
# run does not pay for the fit.
FITTED = {
    "gemm": (0.744463, 12.6358, 208.344, 2.75497e-05),  # e_max, c, k0, t0
    "attention_forward": (0.799231, 34592.4, 1871.47, 1.24203e-21),  # e_max, w0, s0, t0
    "attention_backward": (0.868432, 34592.4, 5197.46, 1.24203e-21),
    "memory": {"norm": (0.563489, 1.24167e-05), "elementwise": (0.930177, 1.23119e-05), "softmax": (0.342179, 0)},  # efficiency, launch s
}


def refit() -> dict:
    """All fitted parameters, computed from the measurements (deterministic)."""
    fwd, bwd = fit_attention()
    return {"gemm": fit_gemm(), "attention_forward": fwd, "attention_backward": bwd, "memory": fit_memory_ops()}


def fitted() -> dict:
    return FITTED


def gemm_fit_error() -> dict:
    """Relative error of the fitted GEMM model on the measured shapes: mean |e|, max |e|, and the worst shape."""
    a = np.asarray(GEMM_US, dtype=float)
    pred = gemm_time_h100(fitted()["gemm"], a[:, 0], a[:, 1], a[:, 2])
    err = pred / (a[:, 3] * 1e-6) - 1
    worst = int(np.argmax(np.abs(err)))
    return {"points": len(a), "mean_abs": float(np.mean(np.abs(err))), "max_abs": float(np.max(np.abs(err))),
            "worst_shape": tuple(int(x) for x in a[worst, :3]), "errors": err}


def memory_fit_error() -> dict[str, float]:
    """Worst relative error of the memory-bound model per op class on the measured rows."""
    copy_rate = 2 * COPY[1][0] / (COPY[1][1] * 1e-6)
    out: dict[str, float] = {}
    for op, tok, hid, us in MEMORY_OP_US:
        cls = MEMORY_CLASSES[op]
        eff, t0 = fitted()["memory"][cls]
        err = abs((t0 + 4.0 * tok * hid / (copy_rate * eff)) / (us * 1e-6) - 1)
        out[cls] = max(out.get(cls, 0.0), err)
    return out


def attention_fit_error() -> dict:
    work, s, fl, tf, tb = _attention_rows()
    p = fitted()
    ef = attention_time_h100(p["attention_forward"], work, s, fl) / tf - 1
    eb = attention_time_h100(p["attention_backward"], work, s, 2.5 * fl) / tb - 1
    return {"points": len(tf), "forward_mean_abs": float(np.mean(np.abs(ef))),
            "forward_max_abs": float(np.max(np.abs(ef))), "backward_mean_abs": float(np.mean(np.abs(eb))),
            "backward_max_abs": float(np.max(np.abs(eb)))}


# ---- the model for one device ----------------------------------------------------------------------------------
class ComputeModel:
    """Seconds for the kernels of a training step on one simulated device.

    device: the cluster's DeviceSpec (its name picks GpuFigures; its memory_bandwidth is the HBM rate);
    fp8: GEMMs at the FP8 rate. A device not in GPUS (a CPU process, an overridden figure) is modelled as an
    H100 scaled by compute_rate / 790 TFLOP/s (the H100 preset's measured figure), and says so in `note`.
    """

    H100_PRESET_RATE = 790e12

    def __init__(self, device, fp8: bool = False):
        self.device = device
        known = GPUS.get(device.name)
        self.note = ""
        if known is None:
            scale = device.compute_rate / self.H100_PRESET_RATE
            known = GpuFigures(device.name, device.compute_rate, 2 * device.compute_rate, H100_SMS,
                               H100.mamf_bf16 * scale, H100.mamf_fp8 * scale)
            self.note = (f"{device.name} has no measured GPU figures: its GEMM and attention rates are the H100's "
                         f"scaled by {scale:.3g} (compute_rate / 790 TFLOP/s) and its peak is its compute_rate")
        elif device.compute_rate != _preset_rate(device.name):
            scale = device.compute_rate / _preset_rate(device.name)
            known = GpuFigures(known.name, known.bf16_peak * scale, known.fp8_peak * scale, known.sms,
                               known.mamf_bf16 * scale, known.mamf_fp8 * scale)
            self.note = f"compute_rate overridden: GEMM, attention and peak rates scaled by {scale:.3g}"
        self.gpu = known
        if fp8 and not known.mamf_fp8:
            raise SimcommError(f"{known.name} has no FP8 tensor cores; fp8 training needs an H100 or H200")
        self.fp8 = fp8
        p = fitted()
        self._gemm = p["gemm"]
        self._att_f, self._att_b = p["attention_forward"], p["attention_backward"]
        self._mem = p["memory"]
        self.rate_scale = known.mamf_bf16 / H100.mamf_bf16
        self.gemm_scale = self.rate_scale * (known.mamf_fp8 / known.mamf_bf16 if fp8 else 1.0)
        self.shape_scale = math.sqrt(known.sms / H100_SMS)
        self.hbm = device.memory_bandwidth

    @property
    def peak(self) -> float:
        """Nominal dense bf16 flop/s (the MFU and HFU denominator)."""
        return self.gpu.bf16_peak

    def gemm(self, m: float, n: float, k: float) -> float:
        """Seconds for (m x k) @ (k x n)."""
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        e_max, c, k0, t0 = self._gemm
        c = c * self.shape_scale
        eff = e_max * _sat(m / c) * _sat(n / c) * _sat(k / k0)
        return t0 + 2.0 * m * n * k / (H100_BF16_PEAK * eff * self.gemm_scale)

    def _attention(self, params, batch_heads: float, sq: float, flops: float) -> float:
        e, w0, s0, t0 = params
        work = batch_heads * sq
        return t0 + flops / (H100_BF16_PEAK * e * self.rate_scale * _sat(work / (w0 * self.shape_scale))
                             * _sat(sq / s0))

    def attention_forward(self, batch_heads: float, sq: float, flops: float) -> float:
        """Seconds for a flash-attention forward of `flops` over batch_heads = b * query heads and sq queries."""
        return self._attention(self._att_f, batch_heads, sq, flops) if flops > 0 else 0.0

    def attention_backward(self, batch_heads: float, sq: float, flops: float) -> float:
        """Seconds for the flash-attention backward (`flops` = 2.5x the forward's, as the kernel recomputes)."""
        return self._attention(self._att_b, batch_heads, sq, flops) if flops > 0 else 0.0

    def kernel(self, k) -> float:
        """Seconds for one kernel of a layer's program (model/programs.py): a GEMM, flash attention or a
        memory-bound op."""
        if k.kind == GEMM:
            return self.gemm(*k.shape)
        if k.kind == ATTENTION:
            bh, sq, real, which = k.shape
            return self.attention_forward(bh, sq, real) if which == "forward" else \
                self.attention_backward(bh, sq, real)
        return self.memory(*k.shape)

    def memory(self, nbytes: float, op_class: str = "elementwise") -> float:
        """Seconds to stream `nbytes` (reads plus writes) for an op of class norm, elementwise or softmax."""
        if nbytes <= 0:
            return 0.0
        eff, t0 = self._mem[op_class]
        return t0 + nbytes / (self.hbm * eff)


@lru_cache(maxsize=None)
def _preset_rate(device_name: str) -> float:
    from ..hardware.presets import A100_PCIE, A100_SXM, H100_SXM, H200_SXM
    return {d.name: d.compute_rate for d in (A100_PCIE, A100_SXM, H100_SXM, H200_SXM)}.get(device_name, 0.0)
