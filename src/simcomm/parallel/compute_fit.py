"""Fitting the compute model (compute_model.py) to the measurements in calibration.py, and its errors there.

Every table was timed lone (CUDA events around one call), so each row carries its harness's per-call overhead
(the host's dispatch of one eager op) on top of the kernel's time on a queued stream, which is what a training
step sees; and each campaign's machine ran the same kernels at its own speed (the 2026-11-26 ones ~10% faster than
the 85 shapes' H100). The fit gives each campaign its own overhead and speed, fitted beside the model; the model's
rates are the reference campaign's and its launch cost comes from kernels timed queued (calibration.LONE_QUEUED_US).

`refit()` reproduces compute_model.FITTED (a test checks they agree); `gemm_fit_error()`, `grouped_fit_error()`,
`attention_fit_error()`, `memory_fit_error()` and `holdout_error()` state the errors per measured table.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import calibration as cal
from .compute_model import (FITTED, GEMM_PRECISIONS, HBM_PRESET, MEMORY_CLASSES, attention_time_h100, gemm_core,
                            grouped_core)

# Each campaign (harness, host and machine of one set of tables) gets its own lone-call overhead and its own kernel
# speed relative to the reference, the one the model's bf16 rates were first fitted to (h100-measured: the 85
# shapes); the 2026-11-26 campaign's kernels ran ~10% faster on the same shapes (a fitted nuisance, like the
# overheads). The model's rates, every precision's, are the reference machine's.
CAMPAIGNS = ("h100-measured", "2026-11-26", "h200-moe", "queue-run")
REFERENCE = "h100-measured"


def levenberg_marquardt(residuals, p0, iterations: int = 300) -> np.ndarray:
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
            break
        cost = c_new
    return theta


# ---- the GEMM rows ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rows:
    """Measured GEMMs as arrays."""

    table: np.ndarray
    precision: np.ndarray
    campaign: np.ndarray  # index into CAMPAIGNS
    lone: np.ndarray  # timed alone (carries the campaign's overhead), else queued
    hbm: np.ndarray  # the GPU preset's HBM rate
    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    seconds: np.ndarray

    def __len__(self):
        return len(self.seconds)

    def subset(self, mask) -> Rows:
        return Rows(*(getattr(self, f)[mask] for f in self.__dataclass_fields__))


def gemm_rows() -> Rows:
    """Every measured GEMM (bf16, fp16, TF32, fp32, FP8; large, thin and expert-shaped; lone and queued)."""
    out = []  # (table, precision, campaign, lone, gpu, m, n, k, us)
    out += [("h100-measured", "bf16", "h100-measured", True, "H100", m, n, k, us) for m, n, k, us in cal.GEMM_US]
    for gpu in cal.GPUS_MEASURED:
        for m, n, k, *times in cal.GEMM_PRECISION_US[gpu]:
            out += [(f"{p} {gpu}", p, "2026-11-26", True, gpu, m, n, k, us)
                    for p, us in zip(cal.PRECISION_COLUMNS, times)]
        out += [(f"thin {gpu}", "bf16", "2026-11-26", True, gpu, m, n, k, us) for m, n, k, us in cal.THIN_GEMM_US[gpu]]
    out += [("experts H200", "bf16", "h200-moe", True, "H200", m, n, k, 2e6 * m * n * k / (tf * 1e12))
            for _name, n, k, rates in cal.EXPERT_GEMM_TFLOPS for m, tf in zip(cal.EXPERT_TOKENS, rates)]
    out += [("fp8 H200", "fp8", "h200-moe", True, "H200", m, n, k, 2e6 * m * n * k / (tf * 1e12))
            for m, n, k, tf, _bf16 in cal.FP8_GEMM_TFLOPS]
    out += [("lone H200", "bf16", "queue-run", True, "H200", m, n, k, lone) for m, n, k, lone, _q in cal.LONE_QUEUED_US]
    out += [("queued H200", "bf16", "queue-run", False, "H200", m, n, k, q) for m, n, k, _lone, q in cal.LONE_QUEUED_US
            if q > cal.HOST_BOUND_US]
    cols = list(zip(*out))
    return Rows(np.array(cols[0]), np.array(cols[1]), np.array([CAMPAIGNS.index(c) for c in cols[2]]),
                np.array(cols[3]), np.array([HBM_PRESET[g] for g in cols[4]]),
                *(np.array(c, dtype=float) for c in cols[5:8]), np.array(cols[8], dtype=float) * 1e-6)


# Free parameters per precision: (e, k0), except fp16, measured within a few percent of bf16 at every shape of the
# same campaign: bf16's shape at its rate times the measured ratio.
FREE = {"bf16": 2, "fp16": 0, "tf32": 2, "fp32": 2, "fp8": 2}
N_FREE = sum(FREE.values())
K0_NONE = 1e-3  # a fitted k0 below this is no dependence on K: stored as 0
_START = {"bf16": (0.75, 100.0), "fp16": (), "tf32": (0.4, 300.0), "fp32": (0.05, 10.0), "fp8": (1.4, 100.0)}
OTHERS = tuple(c for c in CAMPAIGNS if c != REFERENCE)


def fp16_rate_ratio() -> float:
    """fp16's GEMM rate over bf16's: the geometric mean of their time ratio over the paired rows (both GPUs)."""
    col = cal.PRECISION_COLUMNS
    ratios = [row[3 + col.index("bf16")] / row[3 + col.index("fp16")]
              for gpu in cal.GPUS_MEASURED for row in cal.GEMM_PRECISION_US[gpu]]
    return float(np.exp(np.mean(np.log(ratios))))


def _gemm_params(theta, final: bool = False) -> dict:
    p = np.exp(theta)

    def k0(x):
        return 0.0 if final and x < K0_NONE else float(x)
    prec, i = {}, 0
    for pr in GEMM_PRECISIONS:
        if pr == "fp16":
            prec[pr] = (prec["bf16"][0] * fp16_rate_ratio(), prec["bf16"][1])
        else:
            prec[pr] = (float(p[i]), k0(p[i + 1]))
        i += FREE[pr]
    j = i + 3 + len(CAMPAIGNS)
    return {"precision": prec, "beta": float(p[i]), "q": float(p[i + 1]), "t0": float(p[i + 2]),
            "overhead": dict(zip(CAMPAIGNS, (float(x) for x in p[i + 3:j]))),
            "speed": {REFERENCE: 1.0, **dict(zip(OTHERS, (float(x) for x in p[j:])))}}


def _campaign_terms(params: dict, campaign: np.ndarray, lone: np.ndarray):
    """Per row: the kernel speed of its campaign and the overhead it carries (none when queued)."""
    speed = np.array([params["speed"][c] for c in CAMPAIGNS])[campaign]
    over = np.where(lone, np.array([params["overhead"][c] for c in CAMPAIGNS])[campaign], 0.0)
    return speed, over


def predict_rows(params: dict, rows: Rows) -> np.ndarray:
    """Seconds the model gives each row, in its campaign's speed and with its overhead when timed lone."""
    out = np.empty(len(rows))
    for pr in set(rows.precision.tolist()):
        s = rows.precision == pr
        out[s] = gemm_core(params, pr, rows.m[s], rows.n[s], rows.k[s], rows.hbm[s])
    speed, over = _campaign_terms(params, rows.campaign, rows.lone)
    return params["t0"] + out / speed + over


def fit_gemm(rows: Rows | None = None) -> dict:
    """Per precision (e, k0), the shared memory efficiency beta and corner sharpness q, the queued launch cost t0,
    and each campaign's lone-call overhead and kernel speed: least squares on log time over `rows` (all)."""
    rows = gemm_rows() if rows is None else rows
    p0 = [x for pr in GEMM_PRECISIONS for x in _START[pr]] + [0.9, 3.0, 3e-6] + [2e-5] * len(CAMPAIGNS) + \
        [1.0] * len(OTHERS)
    used = {CAMPAIGNS[c] for c in set(rows.campaign[rows.lone].tolist())}
    free = np.array([True] * (N_FREE + 3) + [c in used for c in CAMPAIGNS] +
                    [c in {CAMPAIGNS[i] for i in set(rows.campaign.tolist())} for c in OTHERS])

    def full(th):  # campaigns absent from `rows` keep their start value
        theta = np.log(p0)
        theta[free] = th
        return theta

    def res(th):
        return np.log(predict_rows(_gemm_params(full(th)), rows) / rows.seconds)
    theta = levenberg_marquardt(res, np.log(p0)[free], iterations=500)
    return _gemm_params(full(theta), final=True)


# ---- grouped GEMMs ---------------------------------------------------------------------------------------------
def grouped_rows() -> list[tuple[str, int, int, tuple[int, ...], float, str]]:
    """(table, N, K, tokens per expert, seconds, campaign) of every measured grouped GEMM (bf16, H200, lone)."""
    out = [("grouped H200", n, k, (t,) * g, us * 1e-6, "h200-moe") for _name, n, k, g, t, us in cal.GROUPED_GEMM_US]
    out += [("grouped splits H200", n, k, tokens, us * 1e-6, "queue-run")
            for _name, n, k, _split, tokens, us, _alone in cal.GROUPED_SPLIT_US]
    return out


def _grouped_predict(gemm: dict, gamma: float, overheads: dict, rows) -> np.ndarray:
    return np.array([gemm["t0"] + overheads[c] + grouped_core(gemm, gamma, "bf16", np.asarray(tok, float), n, k,
                                                               HBM_PRESET["H200"]) / gemm["speed"][c]
                     for _t, n, k, tok, _s, c in rows])


def fit_grouped(gemm: dict) -> dict:
    """The grouped kernels' compute efficiency relative to one GEMM (gamma) and the lone overhead of a grouped
    launch in each campaign, with the GEMM model (and its campaigns' speeds) fixed."""
    rows = grouped_rows()
    camps = sorted({r[5] for r in rows})
    secs = np.array([r[4] for r in rows])

    def res(th):
        p = np.exp(th)
        return np.log(_grouped_predict(gemm, p[0], dict(zip(camps, p[1:])), rows) / secs)
    p = np.exp(levenberg_marquardt(res, np.log([0.9] + [3e-5] * len(camps))))
    return {"gamma": float(p[0]), "overhead": dict(zip(camps, (float(x) for x in p[1:])))}


# ---- attention and memory-bound ops ----------------------------------------------------------------------------
def _attention_rows():
    a = np.asarray(cal.ATTENTION_US, dtype=float)
    b, hq, s, d = a[:, 0], a[:, 1], a[:, 3], a[:, 4]
    fwd_flops = 4 * b * hq * s * s * d / 2
    return b * hq * s, s, fwd_flops, a[:, 5] * 1e-6, (a[:, 6] - a[:, 5]) * 1e-6


def fit_attention() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(forward params, backward params) of the bf16 flash-attention model (backward FLOPs = 2.5x forward)."""
    work, s, fl, tf, tb = _attention_rows()
    theta = levenberg_marquardt(lambda th: np.log(attention_time_h100(np.exp(th), work, s, fl) / tf),
                                np.log([0.79, 3.2e4, 1.8e3, 4e-6]))
    e, w0, s0, t0 = np.exp(theta)

    def backward(th):
        eb, sb = np.exp(th)
        return np.log(attention_time_h100((eb, w0, sb, t0), work, s, 2.5 * fl) / tb)
    eb, sb = np.exp(levenberg_marquardt(backward, np.log([0.6, 2e3])))
    return (float(e), float(w0), float(s0), float(t0)), (float(eb), float(w0), float(sb), float(t0))


ACT_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def fit_attention_precision() -> dict[str, tuple[float, float]]:
    """Per activation precision, the (forward, backward) rate relative to bf16's: the geometric mean of
    bf16 time / its time over the SDPA rows of both GPUs (same harness, same shapes)."""
    out = {}
    for prec, dtype in ACT_DTYPES.items():
        fwd, bwd = [], []
        for gpu in cal.GPUS_MEASURED:
            rows = {(b, h, s, d, dt): (f, t) for b, h, s, d, dt, f, t in cal.ATTENTION_PRECISION_US[gpu]}
            for (b, h, s, d, dt), (f, t) in rows.items():
                if dt == dtype:
                    fb, tb = rows[(b, h, s, d, "bfloat16")]
                    fwd.append(fb / f)
                    bwd.append((tb - fb) / (t - f))
        out[prec] = (float(np.exp(np.mean(np.log(fwd)))), float(np.exp(np.mean(np.log(bwd)))))
    return out


def _copy_rate() -> float:
    return 2 * cal.COPY[1][0] / (cal.COPY[1][1] * 1e-6)  # a copy reads and writes every byte


def fit_memory_ops() -> dict[str, tuple[float, float]]:
    """Per op class (norm, elementwise, softmax): (efficiency vs the copy rate, launch seconds), linear least
    squares of time on bytes over the H100's bf16 rows; the copy rate is the measured 3.0 TB/s."""
    out = {}
    for measured, cls in (("layernorm", "norm"), ("gelu", "elementwise"), ("softmax", "softmax")):
        rows = [(2.0 * 2 * tok * hid, us * 1e-6) for op, tok, hid, us in cal.MEMORY_OP_US if op == measured]
        x, y = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        slope, icpt = np.polyfit(x, y, 1)
        if icpt < 0:  # a launch cost cannot be negative: fit through the origin instead
            slope, icpt = float(x @ y / (x @ x)), 0.0
        out[cls] = (float(1.0 / (slope * _copy_rate())), float(icpt))
    return out


def _class_rates(gpu: str) -> dict[tuple[str, str], float]:
    """(op class, dtype) -> mean bytes/s over the 2026-11-26 rows of `gpu` (norm: layernorm and rmsnorm)."""
    acc: dict = {}
    for op, tok, hid, dtype, us in cal.MEMORY_PRECISION_US[gpu]:
        cls = MEMORY_CLASSES.get(op)
        if cls is not None:
            nbytes = 2 * tok * hid * (4 if dtype == "float32" else 2)
            acc.setdefault((cls, dtype), []).append(nbytes / (us * 1e-6))
    return {key: float(np.mean(v)) for key, v in acc.items()}


def fit_memory_factors() -> dict[str, dict[str, dict[str, float]]]:
    """gpu -> op class -> activation precision -> rate factor on (HBM rate x the class's H100 bf16 efficiency):
    the class's measured bytes/s on that GPU in that dtype over the H100's in bf16 (the same harness), divided
    by the ratio of the GPUs' HBM rates. Norms and softmax from their rows; elementwise ops stream at the HBM
    rate on both GPUs in both dtypes (factor 1: copy and add reach ~0.9 of it on the H200; gelu, the class's H100
    source, is not bandwidth-bound in bf16 on the H200)."""
    base = _class_rates("H100")
    out: dict = {}
    for gpu in cal.GPUS_MEASURED:
        rates = _class_rates(gpu)
        hbm = HBM_PRESET[gpu] / HBM_PRESET["H100"]
        out[gpu] = {"elementwise": {p: 1.0 for p in ACT_DTYPES}}
        for cls in ("norm", "softmax"):
            ref = base[(cls, "bfloat16")]
            f = {p: rates[(cls, "float32" if p == "fp32" else "bfloat16")] / ref / hbm for p in ACT_DTYPES}
            out[gpu][cls] = {p: round(v, 6) for p, v in f.items()}
    return out


def refit() -> dict:
    """All fitted parameters, computed from the measurements (deterministic)."""
    gemm = fit_gemm()
    fwd, bwd = fit_attention()
    return {"gemm": gemm, "grouped": fit_grouped(gemm), "attention_forward": fwd, "attention_backward": bwd,
            "attention_precision": fit_attention_precision(), "memory": fit_memory_ops(),
            "memory_factor": fit_memory_factors()}


# ---- errors on the measured tables -----------------------------------------------------------------------------
def _summary(err: np.ndarray) -> dict:
    return {"points": len(err), "mean_abs": float(np.mean(np.abs(err))), "max_abs": float(np.max(np.abs(err)))}


def gemm_fit_error(params: dict | None = None, rows: Rows | None = None) -> dict[str, dict]:
    """Per measured table: relative error of the model (with the table's campaign overhead) on its rows, and the
    worst shape."""
    params = FITTED["gemm"] if params is None else params
    rows = gemm_rows() if rows is None else rows
    err = predict_rows(params, rows) / rows.seconds - 1
    out = {}
    for table in dict.fromkeys(rows.table.tolist()):
        s = rows.table == table
        i = int(np.argmax(np.abs(err) * s))
        out[table] = {**_summary(err[s]), "worst_shape": (int(rows.m[i]), int(rows.n[i]), int(rows.k[i]))}
    return out


def holdout_error(every: int = 4) -> dict[str, dict]:
    """Fit on all rows but every `every`-th of each table, and report the error on the rows held back."""
    rows = gemm_rows()
    index = np.zeros(len(rows), dtype=int)
    for table in set(rows.table.tolist()):
        s = np.where(rows.table == table)[0]
        index[s] = np.arange(len(s))
    held = index % every == every - 1
    return gemm_fit_error(fit_gemm(rows.subset(~held)), rows.subset(held))


def grouped_fit_error() -> dict[str, dict]:
    rows = grouped_rows()
    g = FITTED["grouped"]
    err = _grouped_predict(FITTED["gemm"], g["gamma"], g["overhead"], rows) / np.array([r[4] for r in rows]) - 1
    tables = np.array([r[0] for r in rows])
    return {t: _summary(err[tables == t]) for t in dict.fromkeys(tables.tolist())}


def attention_fit_error() -> dict:
    work, s, fl, tf, tb = _attention_rows()
    ef = attention_time_h100(FITTED["attention_forward"], work, s, fl) / tf - 1
    eb = attention_time_h100(FITTED["attention_backward"], work, s, 2.5 * fl) / tb - 1
    return {"points": len(tf), "forward_mean_abs": float(np.mean(np.abs(ef))),
            "forward_max_abs": float(np.max(np.abs(ef))), "backward_mean_abs": float(np.mean(np.abs(eb))),
            "backward_max_abs": float(np.max(np.abs(eb)))}


def memory_fit_error() -> dict[str, float]:
    """Worst relative error of the memory-bound model per op class on the H100's bf16 rows."""
    out: dict[str, float] = {}
    for op, tok, hid, us in cal.MEMORY_OP_US:
        cls = MEMORY_CLASSES[op]
        eff, t0 = FITTED["memory"][cls]
        err = abs((t0 + 4.0 * tok * hid / (_copy_rate() * eff)) / (us * 1e-6) - 1)
        out[cls] = max(out.get(cls, 0.0), err)
    return out


def memory_precision_error() -> dict[str, float]:
    """Worst relative error per op class of the model's time for each 2026-11-26 row (GPU, dtype) relative to the
    H100's bf16 row of the same op and shape, against the measured ratio (the campaigns' speeds cancel)."""
    from ..hardware.presets import H100_SXM, H200_SXM
    from .compute_model import ComputeModel
    devices = {"H100": H100_SXM, "H200": H200_SXM}
    base = {(op, tok, hid): us for op, tok, hid, dt, us in cal.MEMORY_PRECISION_US["H100"] if dt == "bfloat16"}
    ref = ComputeModel(H100_SXM)
    out: dict[str, float] = {}
    for gpu in cal.GPUS_MEASURED:
        for op, tok, hid, dtype, us in cal.MEMORY_PRECISION_US[gpu]:
            cls = MEMORY_CLASSES[op]
            model = ComputeModel(devices[gpu], "fp32" if dtype == "float32" else "bf16")
            elem = 4 if dtype == "float32" else 2
            got = model.memory(2 * tok * hid * elem, cls) / ref.memory(2 * tok * hid * 2, cls)
            out[cls] = max(out.get(cls, 0.0), abs(got / (us / base[(op, tok, hid)]) - 1))
    return out


__all__ = ["CAMPAIGNS", "Rows", "attention_fit_error", "fit_gemm", "fit_grouped", "gemm_fit_error", "gemm_rows",
           "grouped_fit_error", "holdout_error", "levenberg_marquardt", "memory_fit_error", "memory_precision_error",
           "refit"]
