"""One GPU, one call: GEMM rates by precision, a transformer block by precision, and compute beside SMs held.

Run on a lent H100/H200 (about 3 minutes):  python3 calibration/gpu/precision_and_overlap.py --out DIR
Writes DIR/<gpu>-precision-overlap.json (every figure) and prints Markdown tables. Each section is independent: one
that fails prints its error and the rest still run.

1. GEMMs (M x K) @ (K x N) in fp32 (TF32 off), TF32, fp16 and bf16: TFLOP/s = 2MNK / time.
2. Memory-bound ops (layernorm, gelu, softmax) in fp32 and bf16: effective GB/s (input read + output written once).
3. Causal SDPA forward + backward in bf16, fp16 and fp32 (fp32 has no flash kernel: the backend torch picks).
4. A Llama-style block (RMSNorm, GQA attention, SwiGLU) forward + backward in fp32, TF32, bf16 and fp16.
5. Thin bf16 GEMMs (expert-shaped, M = 64..2048) as the MoE table's rows, on this GPU.
6. Compute beside held SMs: a persistent kernel of k CTAs (8 warps) on a second stream, either copying HBM
   ("copy") or spinning on the global timer ("spin"), started before the measured kernel and outlasting it; the
   GEMMs and the attention of shared/reference/h200-overlap-measured.md, so the two GPUs compare row by row. And
   the copy kernel's own rate alone and beside back-to-back GEMMs (communication slowed by compute).

Timing: CUDA events, warm-up first, median of several repeats (METHOD.md); random inputs, never zeros.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback

import torch
import torch.nn.functional as F

DEV = "cuda"
RESULTS: dict = {}


def median_ms(fn, reps: int = 10, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def section(name):
    def wrap(fn):
        def run(*args):
            t0 = time.time()
            try:
                fn(*args)
            except Exception:  # one failing section must not lose the others
                RESULTS.setdefault("errors", {})[name] = traceback.format_exc()
                print(f"\n### {name}: FAILED\n```\n{traceback.format_exc()}\n```")
            print(f"({name}: {time.time() - t0:.1f} s)", flush=True)
        return run
    return wrap


GEMM_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (2048, 2048, 2048), (4096, 4608, 12288),
               (4096, 12288, 1536), (4096, 6144, 12288), (4096, 1280, 8192), (4096, 7168, 8192),
               (4096, 28672, 4096), (4096, 4096, 14336), (8192, 12288, 6144), (8192, 2304, 9216),
               (2048, 4096, 4096), (1024, 6144, 4096)]
PRECISIONS = {"fp32": (torch.float32, False), "tf32": (torch.float32, True),
              "fp16": (torch.float16, False), "bf16": (torch.bfloat16, False)}


def set_tf32(on: bool):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


@section("gemm_by_precision")
def gemm_by_precision():
    rows = []
    print("\n### GEMM TFLOP/s by precision\n\n| M | N | K | fp32 | tf32 | fp16 | bf16 |\n|---|---|---|---|---|---|---|")
    for m, n, k in GEMM_SHAPES:
        row = {"M": m, "N": n, "K": k}
        for name, (dtype, tf32) in PRECISIONS.items():
            set_tf32(tf32)
            a = torch.randn(m, k, device=DEV, dtype=dtype)
            b = torch.randn(k, n, device=DEV, dtype=dtype)
            ms = median_ms(lambda: a @ b, reps=8 if dtype == torch.float32 else 10)
            row[name + "_us"] = ms * 1e3
            row[name + "_tflops"] = 2 * m * n * k / (ms * 1e-3) / 1e12
        set_tf32(False)
        rows.append(row)
        print(f"| {m} | {n} | {k} | " + " | ".join(f"{row[p + '_tflops']:.0f}" for p in PRECISIONS) + " |",
              flush=True)
    RESULTS["gemm_by_precision"] = rows


@section("memory_ops_by_precision")
def memory_ops_by_precision():
    rows = []
    print("\n### Memory-bound ops, effective GB/s\n\n| op | tokens | hidden | dtype | us | GB/s |\n|---|---|---|---|---|---|")
    ops = {"layernorm": lambda x: F.layer_norm(x, x.shape[-1:]), "gelu": F.gelu,
           "softmax": lambda x: torch.softmax(x, dim=-1), "rmsnorm": lambda x: F.rms_norm(x, x.shape[-1:])}
    for tokens, hidden in ((8192, 8192), (8192, 4096)):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(tokens, hidden, device=DEV, dtype=dtype)
            for op, fn in ops.items():
                ms = median_ms(lambda: fn(x))
                gbs = 2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9
                rows.append({"op": op, "tokens": tokens, "hidden": hidden, "dtype": str(dtype)[6:], "us": ms * 1e3,
                             "GBps": gbs})
                print(f"| {op} | {tokens} | {hidden} | {str(dtype)[6:]} | {ms * 1e3:.1f} | {gbs:.0f} |", flush=True)
    RESULTS["memory_ops_by_precision"] = rows


@section("attention_by_precision")
def attention_by_precision():
    rows = []
    print("\n### Causal SDPA fwd / fwd+bwd (us)\n\n| b | heads | seq | d | dtype | fwd | fwd+bwd |\n|---|---|---|---|---|---|---|")
    for b, h, s, d in ((1, 32, 4096, 128), (1, 16, 8192, 128), (4, 16, 2048, 128)):
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            q, k, v = (torch.randn(b, h, s, d, device=DEV, dtype=dtype, requires_grad=True) for _ in range(3))
            grad = torch.randn(b, h, s, d, device=DEV, dtype=dtype)
            fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps=6)

            def both():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                out.backward(grad)
            total = median_ms(both, reps=6)
            rows.append({"batch": b, "heads": h, "seq": s, "head_dim": d, "dtype": str(dtype)[6:],
                         "fwd_us": fwd * 1e3, "fwd_bwd_us": total * 1e3})
            print(f"| {b} | {h} | {s} | {d} | {str(dtype)[6:]} | {fwd * 1e3:.0f} | {total * 1e3:.0f} |", flush=True)
    RESULTS["attention_by_precision"] = rows


class Block(torch.nn.Module):
    """Llama-style block: RMSNorm, GQA causal attention (SDPA), RMSNorm, SwiGLU MLP; no bias."""

    def __init__(self, hidden, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.qkv = torch.nn.Linear(hidden, (heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.up = torch.nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)
        self.n1, self.n2 = torch.nn.RMSNorm(hidden), torch.nn.RMSNorm(hidden)

    def forward(self, x):
        b, s, hdim = x.shape
        q, k, v = self.qkv(self.n1(x)).split([self.heads * self.head_dim, self.kv_heads * self.head_dim,
                                               self.kv_heads * self.head_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, hdim))
        gate, up = self.up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


@section("block_by_precision")
def block_by_precision():
    rows = []
    print("\n### Llama block fwd+bwd (ms), h 4096, 32 heads, 8 kv, ffn 14336\n\n| seq | batch | precision | fwd | "
          "fwd+bwd | model TFLOP/s |\n|---|---|---|---|---|---|")
    hidden, heads, kv, ffn = 4096, 32, 8, 14336
    for seq, batch in ((4096, 1), (2048, 2)):
        tokens = seq * batch
        gemm_flops = 2 * tokens * hidden * (hidden + 2 * kv * hidden // heads + hidden + 3 * ffn)
        attn_flops = 4 * batch * heads * seq * seq * (hidden // heads) / 2
        flops = 3 * (gemm_flops + attn_flops)
        for name, (dtype, tf32) in PRECISIONS.items():
            set_tf32(tf32)
            torch.manual_seed(0)
            block = Block(hidden, heads, kv, ffn).to(DEV, dtype)
            x = torch.randn(batch, seq, hidden, device=DEV, dtype=dtype, requires_grad=True)
            grad = torch.randn_like(x)
            fwd = median_ms(lambda: block(x), reps=5)

            def step():
                block(x).backward(grad)
            total = median_ms(step, reps=5)
            rows.append({"seq": seq, "batch": batch, "precision": name, "fwd_ms": fwd, "fwd_bwd_ms": total,
                         "model_tflops": flops / (total * 1e-3) / 1e12})
            print(f"| {seq} | {batch} | {name} | {fwd:.2f} | {total:.2f} | {flops / (total * 1e-3) / 1e12:.0f} |",
                  flush=True)
            del block, x, grad
        set_tf32(False)
    RESULTS["block_by_precision"] = rows


@section("thin_gemms")
def thin_gemms():
    rows = []
    shapes = {"deepseek-v3 up": (4096, 7168), "deepseek-v3 down": (7168, 2048), "mixtral up": (28672, 4096),
              "qwen3-30b-a3b up": (1536, 2048)}
    ms_list = (64, 128, 256, 512, 1024, 2048)
    print("\n### Thin bf16 GEMMs, TFLOP/s by M\n\n| GEMM | N | K | " + " | ".join(f"M={m}" for m in ms_list) +
          " |\n|---|---|---|" + "---|" * len(ms_list))
    for name, (n, k) in shapes.items():
        rates = []
        for m in ms_list:
            a = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
            b = torch.randn(k, n, device=DEV, dtype=torch.bfloat16)
            ms = median_ms(lambda: a @ b, reps=20)
            rates.append(2 * m * n * k / (ms * 1e-3) / 1e12)
            rows.append({"gemm": name, "M": m, "N": n, "K": k, "us": ms * 1e3, "tflops": rates[-1]})
        print(f"| {name} | {n} | {k} | " + " | ".join(f"{r:.0f}" for r in rates) + " |", flush=True)
    RESULTS["thin_gemms"] = rows


KERNELS = r"""
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
extern "C" __global__ void spin(unsigned long long duration_ns, unsigned long long* passes) {
    __shared__ int done;
    unsigned long long start = now_ns(), count = 0;
    if (threadIdx.x == 0) done = 0;
    __syncthreads();
    while (!done) {
        __syncthreads();
        if (threadIdx.x == 0) { count++; if (now_ns() - start >= duration_ns) done = 1; }
        __syncthreads();
    }
    if (threadIdx.x == 0) passes[blockIdx.x] = count;
}
extern "C" __global__ void copy(const float4* src, float4* dst, unsigned long long per_block,
                                unsigned long long duration_ns, unsigned long long* passes) {
    __shared__ int done;
    unsigned long long start = now_ns(), count = 0, base = blockIdx.x * per_block;
    if (threadIdx.x == 0) done = 0;
    __syncthreads();
    while (!done) {
        for (unsigned long long i = threadIdx.x; i < per_block; i += blockDim.x) dst[base + i] = src[base + i];
        __syncthreads();
        if (threadIdx.x == 0) { count++; if (now_ns() - start >= duration_ns) done = 1; }
        __syncthreads();
    }
    if (threadIdx.x == 0) passes[blockIdx.x] = count;
}
"""
PER_BLOCK = 1 << 16  # float4 per CTA: 1 MiB read + 1 MiB written per pass


class Holder:
    """k CTAs of 256 threads held on a second stream for a given time (CuPy NVRTC kernels)."""

    def __init__(self):
        import cupy as cp
        self.cp = cp
        module = cp.RawModule(code=KERNELS)
        self.kernels = {"spin": module.get_function("spin"), "copy": module.get_function("copy")}
        self.src = cp.random.random(132 * PER_BLOCK * 4, dtype=cp.float32)
        self.dst = cp.empty_like(self.src)
        self.passes = cp.zeros(132, dtype=cp.uint64)
        self.stream = torch.cuda.Stream()
        self.cp_stream = cp.cuda.ExternalStream(self.stream.cuda_stream)

    def launch(self, mode: str, ctas: int, seconds: float):
        cp = self.cp
        ns = cp.uint64(int(seconds * 1e9))
        with self.cp_stream:
            if mode == "spin":
                self.kernels["spin"]((ctas,), (256,), (ns, self.passes))
            else:
                self.kernels["copy"]((ctas,), (256,), (self.src, self.dst, cp.uint64(PER_BLOCK), ns, self.passes))

    def copied_bytes(self, ctas: int) -> float:
        self.stream.synchronize()
        return float(self.passes[:ctas].sum().get()) * PER_BLOCK * 16 * 2


def beside(holder: Holder, fn, alone_ms: float, mode: str, ctas: int, reps: int = 5) -> float:
    """Median per-call ms of fn while `ctas` CTAs are held (held from before the first call until after the last)."""
    calls = max(3, int(8.0 / max(alone_ms, 1e-3)))
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        holder.launch(mode, ctas, seconds=(calls * alone_ms * 3.5 + 2.0) * 1e-3)
        torch.cuda._sleep(2_000_000)  # ~1 ms at ~2 GHz: the held CTAs become resident first
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return statistics.median(times)


OVERLAP_GEMMS = [(8192, 4608, 12288), (8192, 12288, 1536), (8192, 1280, 8192), (8192, 8192, 8192),
                 (2048, 12288, 6144), (4096, 28672, 4096)]
OVERLAP_CTAS = (8, 16, 24, 32, 64)


@section("overlap")
def overlap():
    holder = Holder()
    rows = []
    cols = [f"{m}{k}" for m in ("copy", "spin") for k in OVERLAP_CTAS]
    print("\n### Slowdown beside k held CTAs (time beside / alone - 1)\n\n| kernel | alone us | " + " | ".join(cols) +
          " |\n|---|---|" + "---|" * len(cols))
    for m, n, k in OVERLAP_GEMMS:
        a = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=DEV, dtype=torch.bfloat16)
        fn = lambda: a @ b  # noqa: E731
        alone = median_ms(fn, reps=10)
        row = {"kernel": f"gemm {m}x{n}x{k}", "alone_us": alone * 1e3}
        for mode in ("copy", "spin"):
            for ctas in OVERLAP_CTAS:
                row[f"{mode}{ctas}"] = beside(holder, fn, alone, mode, ctas) / alone - 1
        rows.append(row)
        print(f"| {row['kernel']} | {alone * 1e3:.1f} | " + " | ".join(f"{100 * row[c]:+.0f}%" for c in cols) + " |",
              flush=True)
    for b_, h, kvh, s in ((1, 32, 8, 8192), (1, 64, 8, 4096), (1, 12, 12, 2048)):
        q = torch.randn(b_, h, s, 128, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        k_ = torch.randn(b_, kvh, s, 128, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b_, kvh, s, 128, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn_like(q)

        def attn():
            F.scaled_dot_product_attention(q, k_, v, is_causal=True, enable_gqa=True).backward(grad)
        alone = median_ms(attn, reps=8)
        row = {"kernel": f"attention b{b_} h{h} kv{kvh} s{s}", "alone_us": alone * 1e3}
        for mode in ("copy", "spin"):
            for ctas in (16, 24, 32):
                row[f"{mode}{ctas}"] = beside(holder, attn, alone, mode, ctas) / alone - 1
        rows.append(row)
        print(f"| {row['kernel']} | {alone * 1e3:.1f} | " +
              " | ".join(f"{100 * row[c]:+.0f}%" if c in row else "" for c in cols) + " |", flush=True)
    RESULTS["overlap"] = rows
    copy_rates(holder)


def copy_rates(holder: Holder):
    """The held copy kernel's own rate, alone and beside back-to-back GEMMs: communication slowed by compute."""
    rows = []
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    print("\n### Copy CTAs' rate (GB/s, read + written), alone and beside 8192^3 GEMMs\n\n| CTAs | alone | beside | "
          "slowdown |\n|---|---|---|---|")
    window = 0.030
    for ctas in (8, 16, 24, 32, 64, 132):
        torch.cuda.synchronize()
        holder.launch("copy", ctas, window)
        alone = holder.copied_bytes(ctas) / window / 1e9
        torch.cuda.synchronize()
        holder.launch("copy", ctas, window)
        for _ in range(int(window / 1.2e-3) + 10):
            a @ b
        beside_rate = holder.copied_bytes(ctas) / window / 1e9
        torch.cuda.synchronize()
        rows.append({"ctas": ctas, "alone_GBps": alone, "beside_gemm_GBps": beside_rate})
        print(f"| {ctas} | {alone:.0f} | {beside_rate:.0f} | {100 * (alone / beside_rate - 1):+.0f}% |", flush=True)
    RESULTS["copy_rates"] = rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    RESULTS["device"] = {"name": props.name, "sms": props.multi_processor_count, "memory_GiB": props.total_memory / 2**30,
                         "torch": torch.__version__, "cuda": torch.version.cuda,
                         "default_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                         "date": time.strftime("%Y-%m-%d")}
    print(f"# {props.name}: {props.multi_processor_count} SMs, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"allow_tf32 default {torch.backends.cuda.matmul.allow_tf32}", flush=True)
    sections = {"gemm": gemm_by_precision, "memory": memory_ops_by_precision, "attention": attention_by_precision,
                "block": block_by_precision, "thin": thin_gemms, "overlap": overlap}
    for name, fn in sections.items():
        if args.only is None or name in args.only:
            fn()
            tag = props.name.replace(" ", "-").replace("/", "-")
            with open(f"{args.out}/{tag}-precision-overlap.json", "w") as f:
                json.dump(RESULTS, f, indent=1)


if __name__ == "__main__":
    main()
