"""One GPU, about 1 minute: the MoE backward's grouped GEMMs, which the compute model extrapolates (issue 23).

    python3 calibration/gpu/moe_backward_grouped.py OUTDIR     # writes OUTDIR/moe-backward-grouped.json, prints rows

ComputeModel.grouped_gemm was fitted to forward grouped GEMMs only (shared/reference/h200-moe-gemm-measured.md); its
wgrad form -- each expert's (k x T_i) @ (T_i x n), the tokens contracted -- is extrapolated. This measures, in bf16
with torch._grouped_mm where the build has it (else one torch.mm per expert, the row says which):
- per expert shape (h, f) of Mixtral 8x7B (4096, 14336), DeepSeek-V3 (7168, 2048) and Qwen3-30B-A3B (2048, 768),
  G local experts (1, 4, 8, 32) and T tokens per expert (64, 256, 1024, 4096), balanced:
  forward FC1 [T, h] x [h, f], its dgrad [T, f] x [f, h] and its wgrad [h, T] x [T, f] per expert.
Rows: (model, G, T, pass, us, TFLOP/s). Timing: CUDA events, 3 warm-ups, median of 10 (as the forward tables).
Compare with `ComputeModel(build_cluster("hgx-h100").device, "bf16").grouped_gemm(counts, n, k, wgrad=True)`.
"""
import json
import statistics
import sys

import torch

D, B = "cuda", torch.bfloat16
SHAPES = {"mixtral-8x7b": (4096, 14336), "deepseek-v3": (7168, 2048), "qwen3-30b-a3b": (2048, 768)}


def median_us(fn, repeats=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def grouped(x, w, offs, per_expert):
    """x [sum T, k] @ w [G, k, n] by groups (offs: cumulative rows), or one mm per expert."""
    if hasattr(torch, "_grouped_mm") and not per_expert:
        return lambda: torch._grouped_mm(x, w, offs=offs)
    starts = [0] + offs.tolist()
    return lambda: [torch.mm(x[starts[i]:starts[i + 1]], w[i]) for i in range(w.shape[0])]


def wgrad(x, dy, counts):
    """Each expert's x_i^T [k, T_i] @ dy_i [T_i, n] (one mm per expert: _grouped_mm's contracted-offsets form is
    not in every build)."""
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + c)
    return lambda: [torch.mm(x[starts[i]:starts[i + 1]].t(), dy[starts[i]:starts[i + 1]]) for i in range(len(counts))]


def main(out: str) -> None:
    rows = []
    per_expert = not hasattr(torch, "_grouped_mm")
    for model, (h, f) in SHAPES.items():
        for G in (1, 4, 8, 32):
            for T in (64, 256, 1024, 4096):
                counts = [T] * G
                offs = torch.tensor(counts, device=D, dtype=torch.int32).cumsum(0, dtype=torch.int32)
                x, dy = torch.randn(T * G, h, device=D, dtype=B), torch.randn(T * G, f, device=D, dtype=B)
                w1, w1t = torch.randn(G, h, f, device=D, dtype=B), torch.randn(G, f, h, device=D, dtype=B)
                flops = 2.0 * T * G * h * f
                for name, fn in (("forward", grouped(x, w1, offs, per_expert)), ("dgrad", grouped(dy, w1t, offs,
                                                                                               per_expert)),
                                 ("wgrad", wgrad(x, dy, counts))):
                    us = median_us(fn)
                    rows.append((model, G, T, name + (" (per expert)" if per_expert or name == "wgrad" else ""),
                                 round(us, 2), round(flops / us / 1e6, 1)))
                    print(*rows[-1], sep="\t", flush=True)
    with open(f"{out}/moe-backward-grouped.json", "w") as fh:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
