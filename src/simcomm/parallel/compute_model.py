"""How long a GPU takes for a GEMM, a grouped GEMM, an attention pass and a memory-bound op, by precision: models
FITTED to measurements (data in calibration.py; compute_fit.py fits them and states the errors; docs/training.md).

GEMM (M x K) @ (K x N) in precision p (bf16, fp16, tf32, fp32 on CUDA cores, fp8), on a queued stream: a roofline
with a smooth corner,  t = t0 + (tc^q + tm^q)^(1/q),
    tc = 2MNK / (989.4 TF x e_p x K / (K + k0_p))          (compute; e_p, k0_p per precision, fp16 = bf16 x 0.977)
    tm = (a_p (MK + NK) + o_p MN) / (beta x HBM rate)      (memory; a_p, o_p operand and output bytes per element)
Thin products (an expert's few tokens) are bound by reading the weights, large ones by the tensor cores; TF32 is
never slower than fp32 (cuBLAS takes the faster kernel). Fitted jointly to every measured GEMM table (85 bf16 H100
shapes; fp32/TF32/fp16/bf16 on an H100 and an H200; thin and expert-shaped bf16 GEMMs, M = 16..8192; FP8), each
campaign's lone-call overhead and kernel speed fitted beside it; the rates are the reference campaign's (the 85
shapes'); t0 is a kernel's launch cost on a queued stream, from kernels timed back to back. Operand layout
(NN/TN/NT) and wave quantisation are not modelled: there is no notion of tiles.

Grouped GEMM (G experts in one launch, as torch._grouped_mm or Transformer Engine's grouped GEMM): each expert
that received tokens costs its roofline, its rows padded to 128-row tiles and its compute at gamma of one GEMM's
rate; the launch costs their sum plus one t0 (the kernel walks the groups in order: a busy expert's compute does
not hide the others' weight reads).

Attention (fused, causal): bf16 flash attention t = t0 + F / (peak x e s(b h s / w0) s(s / s0)), s(x) = x/(1+x),
forward and backward (2.5x the forward's FLOPs) fitted to the H100's rows; fp16 and fp32 (SDPA's memory-efficient
kernel on CUDA cores, ~11x bf16's time) at their measured rate relative to bf16.

Memory-bound ops: t0 + bytes / (HBM rate x efficiency of the op class x factor): the efficiency fitted per class
(norm, elementwise, softmax) on the H100's bf16 rows; the factor, the class's measured rate on the GPU in the
activations' dtype relative to the H100's bf16 (fp32 softmax streams ~1.85x the bytes per second: its time goes
with elements). Callers give bytes at the element size.

GPUs: the H100 and H200 are measured; the H200's tensor cores are the H100's (one GEMM model), its HBM rate (4.3
TB/s against 3.0) speeds thin GEMMs and memory-bound work. Others are extrapolated: GEMM and attention rates scale
by the GPU's best-shape matmul rate (MAMF, stas00/ml-engineering) over the H100's (A100: 0.34; its attention's
parallelism constant by sqrt(108/132 SMs)), memory-bound work by its HBM rate. MFU uses the nominal dense bf16
peak of `GpuFigures` whatever the precision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import SimcommError
from .calibration import H100_BF16_PEAK, H100_SMS
from .model.programs import ATTENTION, GEMM, GROUPED_GEMM


@dataclass(frozen=True)
class GpuFigures:
    """Nominal and best-measured rates of one GPU model (stas00/ml-engineering accelerator tables)."""

    name: str
    bf16_peak: float  # dense, flop/s: the MFU denominator
    fp8_peak: float
    sms: int
    mamf_bf16: float  # maximum achievable matmul flop/s (best shape, brute force)
    mamf_fp8: float
    measured: str = ""  # the calibration tables' name for it (H100, H200), "" when extrapolated


H100 = GpuFigures("H100 SXM", H100_BF16_PEAK, 1979e12, H100_SMS, 794.5e12, 1402.6e12, "H100")
GPUS: dict[str, GpuFigures] = {
    "H100-SXM5-80GB": H100,
    "H800-SXM5-80GB": H100,  # the same GH100 part (only its NVLink is cut)
    "H200-SXM-141GB": GpuFigures("H200 SXM", H100_BF16_PEAK, 1979e12, 132, 794.5e12, 1453.4e12, "H200"),
    "A100-SXM4-80GB": GpuFigures("A100 SXM", 312e12, 0.0, 108, 271.2e12, 0.0),
    # A100 PCIe: the SXM part's tensor cores at a lower power limit; no MAMF figure, the SXM one is used.
    "A100-PCIe-40GB": GpuFigures("A100 PCIe", 312e12, 0.0, 108, 271.2e12, 0.0),
}
HBM_PRESET = {"H100": 3.0e12, "H200": 4.3e12}  # the presets' memory_bandwidth (hardware/presets.py)

# Precisions: a training's (its activations, attention and memory-bound ops; its GEMMs unless fp8) and a GEMM's.
PRECISIONS = ("bf16", "fp16", "tf32", "fp32")
GEMM_PRECISIONS = ("bf16", "fp16", "tf32", "fp32", "fp8")
GEMM_BYTES = {"bf16": (2, 2), "fp16": (2, 2), "tf32": (4, 4), "fp32": (4, 4), "fp8": (1, 2)}  # operand, output
ACTIVATION = {"bf16": "bf16", "fp16": "fp16", "tf32": "fp32", "fp32": "fp32"}  # TF32 is a GEMM mode of fp32
GROUPED_TILE_ROWS = 128  # a grouped kernel's tile height: each expert's tokens are padded to a multiple
MEMORY_CLASSES = {"layernorm": "norm", "rmsnorm": "norm", "gelu": "elementwise", "softmax": "softmax"}


def _sat(x):
    return x / (1.0 + x)


def _roofline(params: dict, precision: str, m_compute, m_memory, n, k, hbm, rate_scale: float, gamma: float = 1.0):
    """(m x k) @ (k x n)'s seconds less t0: compute on m_compute rows at gamma of the fitted rate, memory for
    m_memory rows, joined by the fitted corner."""
    e, k0 = params["precision"][precision]
    a, o = GEMM_BYTES[precision]
    tc = 2.0 * m_compute * n * k / (H100_BF16_PEAK * rate_scale * gamma * e * k / (k + k0))
    tm = (a * (m_memory * k + n * k) + o * m_memory * n) / (params["beta"] * hbm)
    q = params["q"]
    return (tc ** q + tm ** q) ** (1.0 / q)


def gemm_core(params: dict, precision: str, m, n, k, hbm, rate_scale: float = 1.0):
    """Seconds of a GEMM on a queued stream less the launch cost t0 (arrays welcome). TF32 is an allowance, not
    an obligation: never slower than fp32 on CUDA cores (cuBLAS takes the faster kernel)."""
    t = _roofline(params, precision, m, m, n, k, hbm, rate_scale)
    return np.minimum(t, _roofline(params, "fp32", m, m, n, k, hbm, rate_scale)) if precision == "tf32" else t


def grouped_core(params: dict, gamma: float, precision: str, tokens: np.ndarray, n, k, hbm,
                 rate_scale: float = 1.0, wgrad: bool = False) -> float:
    """Seconds of a grouped GEMM less t0: per expert with tokens, its roofline with its rows padded to the tile
    height (wgrad: its tokens are the contraction, (k x T) @ (T x n)) and its compute at gamma of one GEMM's rate;
    summed."""
    t = tokens[tokens > 0]
    if wgrad:
        return float(np.sum(_roofline(params, precision, k, k, n, t, hbm, rate_scale, gamma)))
    padded = np.ceil(t / GROUPED_TILE_ROWS) * GROUPED_TILE_ROWS
    return float(np.sum(_roofline(params, precision, padded, t, n, k, hbm, rate_scale, gamma)))


def attention_time_h100(params, work, s, flops):
    """Seconds for `flops` of bf16 flash attention over `work` = b * heads * s rows and sequence s."""
    e, w0, s0, t0 = params
    return t0 + flops / (H100_BF16_PEAK * e * _sat(work / w0) * _sat(s / s0))


# The fit's result (`compute_fit.refit()` reproduces it from calibration.py; a test checks they agree), kept as
# constants so a run does not pay for the fit.
FITTED = {
    # per precision (e, k0); beta, q; t0: the launch cost queued; each campaign's lone-call overhead and speed
    "gemm": {"precision": {"bf16": (0.722356, 69.2981), "fp16": (0.705591, 69.2981), "tf32": (0.364068, 393.78),
                           "fp32": (0.0443437, 0.0), "fp8": (1.2161, 0.0)},
             "beta": 0.840286, "q": 2.52278, "t0": 6.62701e-06,
             "overhead": {"h100-measured": 2.08371e-05, "2026-11-26": 8.95588e-06, "h200-moe": 1.79619e-05,
                          "queue-run": 2.06646e-05},
             "speed": {"h100-measured": 1.0, "2026-11-26": 1.10637, "h200-moe": 1.08341, "queue-run": 1.18295}},
    "grouped": {"gamma": 0.893933, "overhead": {"h200-moe": 2.65428e-05, "queue-run": 3.17921e-05}},
    "attention_forward": (0.799231, 34592.4, 1871.47, 1.24203e-21),  # e_max, w0, s0, t0
    "attention_backward": (0.868432, 34592.4, 5197.46, 1.24203e-21),
    "attention_precision": {"bf16": (1.0, 1.0), "fp16": (0.969863, 0.991586), "fp32": (0.0893741, 0.0891024)},
    "memory": {"norm": (0.563489, 1.24167e-05), "elementwise": (0.930177, 1.23119e-05), "softmax": (0.342179, 0.0)},
    "memory_factor": {  # gpu -> op class -> activation precision -> rate factor
        "H100": {"elementwise": {"bf16": 1.0, "fp16": 1.0, "fp32": 1.0},
                 "norm": {"bf16": 1.0, "fp16": 1.0, "fp32": 1.0563},
                 "softmax": {"bf16": 1.0, "fp16": 1.0, "fp32": 1.85255}},
        "H200": {"elementwise": {"bf16": 1.0, "fp16": 1.0, "fp32": 1.0},
                 "norm": {"bf16": 0.869443, "fp16": 0.869443, "fp32": 0.984045},
                 "softmax": {"bf16": 0.685738, "fp16": 0.685738, "fp32": 1.30329}}},
}


# ---- the model for one device ----------------------------------------------------------------------------------
class ComputeModel:
    """Seconds for the kernels of a training step on one simulated device.

    device: the cluster's DeviceSpec (its name picks GpuFigures; its memory_bandwidth is the HBM rate);
    precision: the training's, bf16 | fp16 | tf32 | fp32 (fp32 with TF32 GEMMs is tf32): its GEMMs, attention and
    memory-bound ops; fp8: GEMMs in FP8 (Transformer Engine), the rest in `precision`. `gemm` and `grouped_gemm`
    take another GEMM precision when asked. A device not in GPUS (a CPU process, an overridden figure) is
    modelled as an H100 scaled by compute_rate / 790 TFLOP/s (the H100 preset's measured figure), and says so in
    `note`.
    """

    H100_PRESET_RATE = 790e12

    def __init__(self, device, precision: str = "bf16", fp8: bool = False):
        if precision not in PRECISIONS:
            raise SimcommError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.device = device
        self.gpu, self.note = _figures(device)
        if fp8 and not self.gpu.mamf_fp8:
            raise SimcommError(f"{self.gpu.name} has no FP8 tensor cores; fp8 training needs an H100 or H200")
        self.precision, self.fp8 = precision, fp8
        self.gemm_precision = "fp8" if fp8 else precision
        self.key = (precision, fp8)  # what kernel times depend on besides the device
        p = FITTED
        self._gemm, self._grouped = p["gemm"], p["grouped"]
        act = ACTIVATION[precision]
        f, b = p["attention_precision"][act]
        self._att_f = _scaled(p["attention_forward"], f)
        self._att_b = _scaled(p["attention_backward"], b)
        measured = p["memory_factor"].get(self.gpu.measured or "H100", {})
        self._mem = {cls: (eff * measured.get(cls, {}).get(act, 1.0), t0) for cls, (eff, t0) in p["memory"].items()}
        self.rate_scale = self.gpu.mamf_bf16 / H100.mamf_bf16
        self.shape_scale = math.sqrt(self.gpu.sms / H100_SMS)
        self.hbm = device.memory_bandwidth

    @property
    def peak(self) -> float:
        """Nominal dense bf16 flop/s (the MFU and HFU denominator)."""
        return self.gpu.bf16_peak

    def _gemm_precision(self, precision: str | None) -> str:
        p = self.gemm_precision if precision is None else precision
        if p not in GEMM_PRECISIONS:
            raise SimcommError(f"GEMM precision must be one of {', '.join(GEMM_PRECISIONS)}, got {p!r}")
        if p == "fp8" and not self.gpu.mamf_fp8:
            raise SimcommError(f"{self.gpu.name} has no FP8 tensor cores")
        return p

    def gemm(self, m: float, n: float, k: float, precision: str | None = None) -> float:
        """Seconds for (m x k) @ (k x n) on a queued stream, in the model's GEMM precision unless given."""
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        p = self._gemm_precision(precision)
        return self._gemm["t0"] + float(gemm_core(self._gemm, p, m, n, k, self.hbm, self.rate_scale))

    def grouped_gemm(self, tokens_per_expert, n: float, k: float, precision: str | None = None,
                     wgrad: bool = False) -> float:
        """Seconds for one grouped GEMM (one launch): expert i multiplies its tokens_per_expert[i] x k rows by its
        own k x n weight (experts with no tokens cost nothing); never less than the busiest expert's GEMM. The
        backward: dgrad is grouped_gemm(tokens, k, n); wgrad=True is each expert's (k x T_i) @ (T_i x n), the
        tokens contracted (extrapolated: only forward grouped GEMMs were measured)."""
        tokens = np.asarray(tokens_per_expert, dtype=float).reshape(-1)
        if not np.all(np.isfinite(tokens)) or np.any(tokens < 0):
            raise SimcommError(f"tokens_per_expert must be finite and >= 0, got {tokens_per_expert!r}")
        if n <= 0 or k <= 0 or not np.any(tokens > 0):
            return 0.0
        p = self._gemm_precision(precision)
        return self._gemm["t0"] + grouped_core(self._gemm, self._grouped["gamma"], p, tokens, n, k, self.hbm,
                                               self.rate_scale, wgrad)

    def _attention(self, params, batch_heads: float, sq: float, flops: float) -> float:
        e, w0, s0, t0 = params
        work = batch_heads * sq
        return t0 + flops / (H100_BF16_PEAK * e * self.rate_scale * _sat(work / (w0 * self.shape_scale))
                             * _sat(sq / s0))

    def attention_forward(self, batch_heads: float, sq: float, flops: float) -> float:
        """Seconds for a fused causal attention forward of `flops` over batch_heads = b * query heads and sq
        queries (flash in bf16/fp16; in fp32 the memory-efficient kernel)."""
        return self._attention(self._att_f, batch_heads, sq, flops) if flops > 0 else 0.0

    def attention_backward(self, batch_heads: float, sq: float, flops: float) -> float:
        """Seconds for the fused attention backward (`flops` = 2.5x the forward's, as the kernel recomputes)."""
        return self._attention(self._att_b, batch_heads, sq, flops) if flops > 0 else 0.0

    def kernel(self, k) -> float:
        """Seconds for one kernel of a layer's program (model/programs.py): a GEMM, a grouped GEMM, flash attention
        or a memory-bound op."""
        if k.kind == GEMM:
            return self.gemm(*k.shape)
        if k.kind == GROUPED_GEMM:
            counts, n, kk, wgrad = k.shape
            return self.grouped_gemm(counts, n, kk, wgrad=wgrad)
        if k.kind == ATTENTION:
            bh, sq, real, which = k.shape
            return self.attention_forward(bh, sq, real) if which == "forward" else \
                self.attention_backward(bh, sq, real)
        return self.memory(*k.shape)

    def memory(self, nbytes: float, op_class: str = "elementwise") -> float:
        """Seconds to stream `nbytes` (reads plus writes, at the activations' element size) for an op of class
        norm, elementwise or softmax."""
        if nbytes <= 0:
            return 0.0
        eff, t0 = self._mem[op_class]
        return t0 + nbytes / (self.hbm * eff)


def _scaled(params, factor: float) -> tuple:
    e, *rest = params
    return (e * factor, *rest)


def _figures(device) -> tuple[GpuFigures, str]:
    """The device's GpuFigures and a note when they are extrapolated or scaled."""
    known = GPUS.get(device.name)
    if known is None:
        scale = device.compute_rate / ComputeModel.H100_PRESET_RATE
        figures = GpuFigures(device.name, device.compute_rate, 2 * device.compute_rate, H100_SMS,
                             H100.mamf_bf16 * scale, H100.mamf_fp8 * scale)
        return figures, (f"{device.name} has no measured GPU figures: its GEMM and attention rates are the H100's "
                         f"scaled by {scale:.3g} (compute_rate / 790 TFLOP/s) and its peak is its compute_rate")
    if device.compute_rate != _preset_rate(device.name):
        scale = device.compute_rate / _preset_rate(device.name)
        figures = GpuFigures(known.name, known.bf16_peak * scale, known.fp8_peak * scale, known.sms,
                             known.mamf_bf16 * scale, known.mamf_fp8 * scale, known.measured)
        return figures, f"compute_rate overridden: GEMM, attention and peak rates scaled by {scale:.3g}"
    return known, ""


@lru_cache(maxsize=None)
def _preset_rate(device_name: str) -> float:
    from ..hardware.presets import A100_PCIE, A100_SXM, H100_SXM, H200_SXM, H800_SXM
    return {d.name: d.compute_rate for d in (A100_PCIE, A100_SXM, H100_SXM, H200_SXM, H800_SXM)}.get(device_name,
                                                                                                      0.0)
