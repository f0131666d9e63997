"""One GPU, under 1 minute: DeepSeek-V3's kernels the compute model extrapolates (issue 23, docs/training.md's MoE
section, "the remaining gap").

    python3 calibration/gpu/deepseek_v3_kernels.py OUTDIR     # writes OUTDIR/deepseek-v3-kernels.json, prints rows

- MLA core attention, causal, bf16, one sequence of 4096 and 128 heads: queries and keys of 192 (128 + 64 RoPE),
  values of 128 (SDPA's flash kernel where the build takes unequal head dims, else the values padded to 192 as
  Megatron-Core does for flash), forward and forward + backward. The model counts FLOPs with head dim 160 and
  times them at the H100's head-dim-128 rate.
- FP8 e4m3 GEMMs (torch._scaled_mm, per-tensor scales, bf16 out) at DeepSeek-V3's shapes with 4096 tokens per GPU:
  q_up [4096, 1536] x [1536, 24576], kv_up [4096, 512] x [512, 32768], proj [4096, 16384] x [16384, 7168], a
  local expert's FC1 [8192, 7168] x [7168, 4096] and FC2 [8192, 2048] x [2048, 7168]; bf16 beside each.
Rows: (kernel, us, TFLOP/s of the real FLOPs). Timing: CUDA events, 3 warm-ups, median of 10.
Compare with `ComputeModel(build_cluster("hgx-h100").device, "bf16", fp8=True)`.
"""
import json
import sys

import torch
import torch.nn.functional as F
from moe_backward_grouped import B, D, median_us  # (this folder: sys.path[0] when run as a script)


def attention_rows():
    s, heads, dqk, dv = 4096, 128, 192, 128
    q, k = (torch.randn(1, heads, s, dqk, device=D, dtype=B, requires_grad=True) for _ in range(2))
    out = []
    for label, vdim in (("mla v128", dv), ("mla v padded to 192", dqk)):
        v = torch.randn(1, heads, s, vdim, device=D, dtype=B, requires_grad=True)
        try:
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
                fwd = median_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                grad = torch.randn(1, heads, s, vdim, device=D, dtype=B)
                both = median_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad))
        except RuntimeError as exc:
            out.append((label, "not run: " + str(exc).splitlines()[0], 0.0))
            continue
        flops = 2 * heads * s * s * (dqk + vdim) / 2  # causal half
        out += [(f"{label} forward", fwd, flops / fwd / 1e6), (f"{label} fwd+bwd", both, 3.5 * flops / both / 1e6)]
    return out


def gemm_rows():
    shapes = {"q_up": (4096, 24576, 1536), "kv_up": (4096, 32768, 512), "proj": (4096, 7168, 16384),
              "expert fc1": (8192, 4096, 7168), "expert fc2": (8192, 7168, 2048)}
    out = []
    one = torch.tensor(1.0, device=D)
    for name, (m, n, k) in shapes.items():
        a, b = torch.randn(m, k, device=D, dtype=B), torch.randn(n, k, device=D, dtype=B)
        bf16 = median_us(lambda: a @ b.t())
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        fp8 = median_us(lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=B))
        flops = 2 * m * n * k
        out += [(f"{name} bf16", bf16, flops / bf16 / 1e6), (f"{name} fp8", fp8, flops / fp8 / 1e6)]
    return out


def main(outdir: str) -> None:
    rows = attention_rows() + gemm_rows()
    for r in rows:
        print(f"{r[0]:28s} {r[1] if isinstance(r[1], str) else f'{r[1]:10.1f} us'}  {r[2]:7.0f} TFLOP/s")
    with open(f"{outdir}/deepseek-v3-kernels.json", "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
