"""Measured rates on one H100 SXM (shared/reference/h100-measured.md): the data the compute model is fitted to.

Measured on one NVIDIA H100 80GB HBM3 (132 SMs, 1980 MHz SM clock, 700 W), PyTorch 2.11 + CUDA 13.0, bf16, random
data, CUDA-event timing, median of 8-10 runs after warm-up. Times in microseconds as measured.
"""
from __future__ import annotations

H100_SMS = 132
H100_BF16_PEAK = 989.4e12  # dense bf16: 1830 MHz x 528 tensor cores x 512 FMA/clk x 2

# (M, N, K, time in us) of (M x K) @ (K x N), bf16, row-major operands (NN).
GEMM_US: tuple[tuple[int, int, int, float], ...] = (
    (8192, 8192, 8192, 1446.4), (4096, 4096, 4096, 206.7), (16384, 16384, 16384, 11796.3), (2048, 2048, 2048, 54.4),
    (1024, 1024, 1024, 39.3), (1024, 4608, 12288, 220.1), (1024, 12288, 1536, 90.9), (1024, 6144, 12288, 267.8),
    (1024, 12288, 6144, 261.9), (1024, 1280, 8192, 68.8), (1024, 8192, 1024, 54.5), (1024, 7168, 8192, 235.0),
    (1024, 8192, 3584, 120.7), (1024, 6144, 4096, 105.1), (1024, 4096, 4096, 76.8), (1024, 28672, 4096, 394.2),
    (1024, 4096, 14336, 204.4), (1024, 6912, 2304, 87.1), (1024, 2304, 2304, 38.0), (1024, 9216, 2304, 85.1),
    (1024, 2304, 9216, 77.8), (2048, 4608, 12288, 316.0), (2048, 12288, 1536, 133.7), (2048, 6144, 12288, 411.1),
    (2048, 12288, 6144, 418.5), (2048, 1280, 8192, 79.4), (2048, 8192, 1024, 73.1), (2048, 7168, 8192, 361.0),
    (2048, 8192, 3584, 184.1), (2048, 6144, 4096, 159.3), (2048, 4096, 4096, 110.2), (2048, 28672, 4096, 649.7),
    (2048, 4096, 14336, 320.9), (2048, 6912, 2304, 114.1), (2048, 2304, 2304, 52.0), (2048, 9216, 2304, 145.6),
    (2048, 2304, 9216, 140.0), (4096, 4608, 12288, 624.2), (4096, 12288, 1536, 242.0), (4096, 6144, 12288, 812.0),
    (4096, 12288, 6144, 827.8), (4096, 1280, 8192, 140.8), (4096, 8192, 1024, 132.3), (4096, 7168, 8192, 682.0),
    (4096, 8192, 3584, 369.0), (4096, 6144, 4096, 322.8), (4096, 4096, 4096, 224.2), (4096, 28672, 4096, 1408.5),
    (4096, 4096, 14336, 718.6), (4096, 6912, 2304, 235.5), (4096, 2304, 2304, 92.7), (4096, 9216, 2304, 306.6),
    (4096, 2304, 9216, 283.8), (8192, 4608, 12288, 1257.8), (8192, 12288, 1536, 486.4), (8192, 6144, 12288, 1698.5),
    (8192, 12288, 6144, 1717.0), (8192, 1280, 8192, 275.8), (8192, 8192, 1024, 261.3), (8192, 7168, 8192, 1421.7),
    (8192, 8192, 3584, 762.8), (8192, 6144, 4096, 668.4), (8192, 4096, 4096, 441.7), (8192, 28672, 4096, 2774.4),
    (8192, 4096, 14336, 1397.7), (8192, 6912, 2304, 440.2), (8192, 2304, 2304, 170.3), (8192, 9216, 2304, 579.0),
    (8192, 2304, 9216, 542.4), (16384, 4608, 12288, 2525.1), (16384, 12288, 1536, 1016.3), (16384, 6144, 12288, 3494.5),
    (16384, 12288, 6144, 3596.0), (16384, 1280, 8192, 560.9), (16384, 8192, 1024, 512.0), (16384, 7168, 8192, 2793.9),
    (16384, 8192, 3584, 1528.1), (16384, 6144, 4096, 1223.5), (16384, 4096, 4096, 861.1), (16384, 28672, 4096, 5676.3),
    (16384, 4096, 14336, 2878.0), (16384, 6912, 2304, 875.7), (16384, 2304, 2304, 318.0), (16384, 9216, 2304, 1148.8),
    (16384, 2304, 9216, 1096.4),)

# (M, N, K, layout, time in us): the backward pass's transposed operands (NN = A @ B, TN = A^T @ B, NT = A @ B^T).
GEMM_LAYOUT_US: tuple[tuple[int, int, int, str, float], ...] = (
    (8192, 12288, 4608, "NN", 1198), (8192, 12288, 4608, "TN", 1198), (8192, 12288, 4608, "NT", 1472),
    (8192, 6144, 12288, "NN", 1856), (8192, 6144, 12288, "TN", 1721), (8192, 6144, 12288, "NT", 1671),
    (4096, 8192, 7168, "NN", 685), (4096, 8192, 7168, "TN", 678), (4096, 8192, 7168, "NT", 638),
    (2048, 12288, 6144, "NN", 416), (2048, 12288, 6144, "TN", 415), (2048, 12288, 6144, "NT", 416),
    (8192, 4096, 28672, "NN", 2428), (8192, 4096, 28672, "TN", 2634), (8192, 4096, 28672, "NT", 2638),
)

# Causal flash attention (PyTorch SDPA, flash backend, bf16):
# (batch, query heads, kv heads, sequence, head dim, forward us, forward + backward us).
# FLOPs convention of the source: forward 4 * b * heads * s^2 * d / 2 (causal half), backward 2.5x that.
ATTENTION_US: tuple[tuple[int, int, int, int, int, float, float], ...] = (
    (1, 12, 12, 2048, 128, 75, 314), (2, 12, 12, 2048, 128, 99, 957), (4, 6, 6, 2048, 128, 110, 616),
    (1, 8, 1, 8192, 128, 347, 1219), (1, 32, 8, 8192, 128, 948, 3800), (1, 16, 1, 8192, 128, 533, 2029),
    (1, 16, 16, 4096, 128, 196, 899), (8, 24, 24, 2048, 96, 447, 1907), (1, 64, 8, 4096, 128, 510, 2122),
    (1, 8, 8, 16384, 128, 964, 3484), (1, 8, 8, 32768, 128, 3441, 14342),
)

# Memory-bound ops in bf16: (op, tokens, hidden, time in us); bytes = input read once + output written once.
MEMORY_OP_US: tuple[tuple[str, int, int, float], ...] = (
    ("layernorm", 2048, 12288, 75.6), ("gelu", 2048, 12288, 48.1), ("softmax", 2048, 12288, 69.4),
    ("layernorm", 8192, 8192, 171.4), ("gelu", 8192, 8192, 108.0), ("softmax", 8192, 8192, 275.9),
    ("layernorm", 8192, 4096, 86.5), ("gelu", 8192, 4096, 60.3), ("softmax", 8192, 4096, 119.8),
)
# Device-to-device copy: 1 GiB in 0.721 ms, 4 GiB in 2.849 ms (bytes read plus written): ~3.0 TB/s.
COPY = ((1 << 30, 721.0), (4 << 30, 2849.0))


# ---- one-GPU measurements by precision, H100 and H200 SXM, 2026-11-26 ------------------------------------------
# calibration/gpu/precision_and_overlap.py (its measured/ folder holds the JSON): torch 2.11.0+cu130, CUDA 13.0,
# max SM clock 1980 MHz, 700 W, random data, CUDA events around one call, medians of 8-10 after warm-up.
GPUS_MEASURED = ("H100", "H200")
PRECISION_COLUMNS = ("fp32", "tf32", "fp16", "bf16")  # fp32: TF32 off (torch's default); tf32: allow_tf32 on

# (M, N, K, fp32 us, tf32 us, fp16 us, bf16 us) of (M x K) @ (K x N), NN.
GEMM_PRECISION_US: dict[str, tuple[tuple[int, int, int, float, float, float, float], ...]] = {
    "H100": ((8192, 8192, 8192, 21464.0, 2737.0, 1500.1, 1400.5), (4096, 4096, 4096, 2725.3, 386.5, 192.8, 187.1),
             (2048, 2048, 2048, 358.6, 64.4, 38.0, 37.3), (4096, 4608, 12288, 9550.7, 1252.8, 609.9, 589.4),
             (4096, 12288, 1536, 3118.5, 489.0, 224.0, 218.9), (4096, 6144, 12288, 12143.7, 1512.8, 804.7, 777.5),
             (4096, 1280, 8192, 2097.2, 288.8, 133.9, 131.9), (4096, 7168, 8192, 9548.7, 1340.6, 674.9, 634.3),
             (4096, 28672, 4096, 18878.4, 3054.0, 1384.6, 1348.7), (4096, 4096, 14336, 9589.0, 1169.4, 620.3, 621.4),
             (8192, 12288, 6144, 25157.9, 3071.2, 1774.3, 1784.7), (8192, 2304, 9216, 7599.6, 969.1, 463.4, 452.1),
             (2048, 4096, 4096, 1430.0, 204.0, 107.9, 106.0), (1024, 6144, 4096, 1179.7, 190.2, 84.0, 82.9)),
    "H200": ((8192, 8192, 8192, 21489.1, 2688.4, 1458.0, 1397.1), (4096, 4096, 4096, 2862.6, 369.1, 209.3, 190.0),
             (2048, 2048, 2048, 368.4, 65.4, 38.4, 37.7), (4096, 4608, 12288, 9522.8, 1235.6, 612.5, 588.9),
             (4096, 12288, 1536, 3230.5, 499.8, 221.3, 219.7), (4096, 6144, 12288, 12166.3, 1506.5, 813.7, 788.5),
             (4096, 1280, 8192, 2227.0, 280.2, 133.0, 130.4), (4096, 7168, 8192, 9510.9, 1191.1, 629.7, 606.8),
             (4096, 28672, 4096, 18877.4, 2816.3, 1346.3, 1438.4), (4096, 4096, 14336, 9653.6, 1171.3, 627.1, 605.5),
             (8192, 12288, 6144, 25447.1, 3250.8, 1763.1, 1866.1), (8192, 2304, 9216, 7692.3, 945.8, 462.7, 446.2),
             (2048, 4096, 4096, 1369.8, 193.5, 104.3, 101.2), (1024, 6144, 4096, 1086.6, 183.2, 81.7, 79.6)),
}

# Thin bf16 GEMMs shaped as experts' (M tokens routed to the expert): (M, N, K, us).
THIN_GEMM_US: dict[str, tuple[tuple[int, int, int, float], ...]] = {
    "H100": ((64, 4096, 7168, 40.9), (128, 4096, 7168, 37.3), (256, 4096, 7168, 43.7), (512, 4096, 7168, 54.9),
             (1024, 4096, 7168, 94.3), (2048, 4096, 7168, 174.0), (64, 7168, 2048, 21.6), (128, 7168, 2048, 22.5),
             (256, 7168, 2048, 28.1), (512, 7168, 2048, 38.5), (1024, 7168, 2048, 60.5), (2048, 7168, 2048, 102.9),
             (64, 28672, 4096, 93.4), (128, 28672, 4096, 98.7), (256, 28672, 4096, 111.6), (512, 28672, 4096, 191.9),
             (1024, 28672, 4096, 336.4), (2048, 28672, 4096, 627.5), (64, 1536, 2048, 20.4), (128, 1536, 2048, 20.6),
             (256, 1536, 2048, 20.5), (512, 1536, 2048, 21.6), (1024, 1536, 2048, 25.4), (2048, 1536, 2048, 33.3)),
    "H200": ((64, 4096, 7168, 32.7), (128, 4096, 7168, 33.2), (256, 4096, 7168, 36.4), (512, 4096, 7168, 53.2),
             (1024, 4096, 7168, 90.6), (2048, 4096, 7168, 166.8), (64, 7168, 2048, 18.8), (128, 7168, 2048, 20.6),
             (256, 7168, 2048, 24.6), (512, 7168, 2048, 36.6), (1024, 7168, 2048, 58.5), (2048, 7168, 2048, 101.7),
             (64, 28672, 4096, 72.3), (128, 28672, 4096, 116.9), (256, 28672, 4096, 104.8), (512, 28672, 4096, 183.6),
             (1024, 28672, 4096, 318.9), (2048, 28672, 4096, 621.4), (64, 1536, 2048, 19.6), (128, 1536, 2048, 20.1),
             (256, 1536, 2048, 19.4), (512, 1536, 2048, 20.3), (1024, 1536, 2048, 23.1), (2048, 1536, 2048, 33.2)),
}

# Memory-bound ops: (op, tokens, hidden, dtype, us); bytes = input read once + output written once.
MEMORY_PRECISION_US: dict[str, tuple[tuple[str, int, int, str, float], ...]] = {
    "H100": (("layernorm", 8192, 8192, "float32", 293.8), ("gelu", 8192, 8192, "float32", 187.2),
             ("softmax", 8192, 8192, "float32", 296.6), ("rmsnorm", 8192, 8192, "float32", 283.3),
             ("layernorm", 8192, 8192, "bfloat16", 154.8), ("gelu", 8192, 8192, "bfloat16", 102.2),
             ("softmax", 8192, 8192, "bfloat16", 273.5), ("rmsnorm", 8192, 8192, "bfloat16", 152.1),
             ("layernorm", 8192, 4096, "float32", 146.1), ("gelu", 8192, 4096, "float32", 97.8),
             ("softmax", 8192, 4096, "float32", 122.4), ("rmsnorm", 8192, 4096, "float32", 144.8),
             ("layernorm", 8192, 4096, "bfloat16", 77.8), ("gelu", 8192, 4096, "bfloat16", 56.1),
             ("softmax", 8192, 4096, "bfloat16", 113.8), ("rmsnorm", 8192, 4096, "bfloat16", 74.8)),
    "H200": (("layernorm", 8192, 8192, "float32", 224.8), ("gelu", 8192, 8192, "float32", 138.1),
             ("softmax", 8192, 8192, "float32", 298.0), ("rmsnorm", 8192, 8192, "float32", 219.9),
             ("layernorm", 8192, 8192, "bfloat16", 127.7), ("gelu", 8192, 8192, "bfloat16", 100.0),
             ("softmax", 8192, 8192, "bfloat16", 269.5), ("rmsnorm", 8192, 8192, "bfloat16", 118.5),
             ("layernorm", 8192, 4096, "float32", 106.2), ("gelu", 8192, 4096, "float32", 76.7),
             ("softmax", 8192, 4096, "float32", 120.1), ("rmsnorm", 8192, 4096, "float32", 105.6),
             ("layernorm", 8192, 4096, "bfloat16", 65.9), ("gelu", 8192, 4096, "bfloat16", 56.0),
             ("softmax", 8192, 4096, "bfloat16", 119.0), ("rmsnorm", 8192, 4096, "bfloat16", 57.3)),
}

# Causal SDPA (torch picks the kernel: flash in bf16/fp16, memory-efficient in fp32; MHA, no TF32):
# (batch, heads, sequence, head dim, dtype, forward us, forward + backward us).
ATTENTION_PRECISION_US: dict[str, tuple[tuple[int, int, int, int, str, float, float], ...]] = {
    "H100": ((1, 32, 4096, 128, "bfloat16", 291.9, 1224.1), (1, 32, 4096, 128, "float16", 283.9, 1266.2),
             (1, 32, 4096, 128, "float32", 3292.9, 13665.7), (1, 16, 8192, 128, "bfloat16", 540.5, 2056.1),
             (1, 16, 8192, 128, "float16", 571.1, 2113.3), (1, 16, 8192, 128, "float32", 6439.6, 25494.2),
             (4, 16, 2048, 128, "bfloat16", 182.2, 885.0), (4, 16, 2048, 128, "float16", 196.7, 810.9),
             (4, 16, 2048, 128, "float32", 1759.0, 8219.4)),
    "H200": ((1, 32, 4096, 128, "bfloat16", 276.1, 1127.3), (1, 32, 4096, 128, "float16", 287.1, 1200.8),
             (1, 32, 4096, 128, "float32", 3247.0, 13354.5), (1, 16, 8192, 128, "bfloat16", 501.3, 1962.4),
             (1, 16, 8192, 128, "float16", 513.2, 2010.5), (1, 16, 8192, 128, "float32", 6336.3, 25549.9),
             (4, 16, 2048, 128, "bfloat16", 167.0, 720.9), (4, 16, 2048, 128, "float16", 169.9, 735.2),
             (4, 16, 2048, 128, "float32", 1698.9, 7211.1)),
}

# A Llama-style block (RMSNorm, GQA 32/8 heads with SDPA, SwiGLU; h 4096, ffn 14336, no bias), kernels queued:
# (sequence, batch, precision, forward ms, forward + backward ms).
BLOCK_MS: dict[str, tuple[tuple[int, int, str, float, float], ...]] = {
    "H100": ((4096, 1, "fp32", 49.19, 136.17), (4096, 1, "tf32", 14.54, 37.14), (4096, 1, "fp16", 3.17, 10.29),
             (4096, 1, "bf16", 3.06, 10.02), (2048, 2, "fp32", 41.98, 121.01), (2048, 2, "tf32", 9.89, 28.92),
             (2048, 2, "fp16", 2.94, 9.75), (2048, 2, "bf16", 2.85, 9.52)),
    "H200": ((4096, 1, "fp32", 48.10, 133.11), (4096, 1, "tf32", 12.90, 32.88), (4096, 1, "fp16", 3.02, 10.20),
             (4096, 1, "bf16", 2.93, 9.41), (2048, 2, "fp32", 41.67, 119.86), (2048, 2, "tf32", 8.72, 26.35),
             (2048, 2, "fp16", 2.89, 9.27), (2048, 2, "bf16", 2.80, 9.02)),
}


# ---- expert-shaped, grouped and FP8 GEMMs on one H200 (shared/reference/h200-moe-gemm-measured.md) ------------
# torch 2.11, CUDA 13.0, bf16, medians of 10; published as TFLOP/s rounded to whole numbers (below ~20 TFLOP/s the
# rounding alone is up to 25% of the time).
EXPERT_TOKENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
# (expert GEMM, N, K, TFLOP/s at each of EXPERT_TOKENS = M)
EXPERT_GEMM_TFLOPS: tuple[tuple[str, int, int, tuple[int, ...]], ...] = (
    ("deepseek-v3 up", 4096, 7168, (20, 41, 84, 167, 305, 462, 582, 653, 727, 741)),
    ("deepseek-v3 down", 7168, 2048, (12, 23, 54, 101, 183, 317, 433, 499, 657, 704)),
    ("mixtral up", 28672, 4096, (47, 92, 172, 226, 512, 573, 719, 767, 756, 748)),
    ("mixtral down", 4096, 14336, (37, 81, 139, 299, 433, 564, 620, 662, 769, 772)),
    ("qwen3-30b-a3b up", 1536, 2048, (4, 6, 19, 33, 52, 94, 236, 358, 445, 548)),
    ("qwen3-30b-a3b down", 2048, 768, (2, 3, 6, 17, 38, 77, 157, 250, 375, 472)),
)
# torch._grouped_mm, G experts of T tokens each in one launch: (expert GEMM, N, K, G, T, us).
GROUPED_GEMM_US: tuple[tuple[str, int, int, int, int, float], ...] = tuple(
    (name, n, k, g, t, us) for name, n, k, rows in (
        ("deepseek-v3 up", 4096, 7168, ((8, 2048, 1295.0), (8, 512, 360.7), (32, 256, 735.3), (64, 128, 1084.6),
                                        (256, 64, 4565.3), (256, 16, 4652.3), (256, 128, 4443.3))),
        ("deepseek-v3 down", 7168, 2048, ((8, 2048, 878.6), (8, 512, 255.9), (32, 256, 459.6), (64, 128, 647.2),
                                          (256, 64, 2426.9), (256, 16, 2274.7), (256, 128, 2314.6))),
        ("mixtral up", 28672, 4096, ((8, 2048, 5690.5), (8, 512, 1547.5), (32, 256, 2835.5), (64, 128, 4320.3),
                                     (256, 64, 18610.4), (256, 16, 18544.1), (256, 128, 19141.6))),
        ("mixtral down", 4096, 14336, ((8, 2048, 2895.5), (8, 512, 744.1), (32, 256, 1458.8), (64, 128, 2147.1),
                                       (256, 64, 9274.8), (256, 16, 9150.3), (256, 128, 9297.6))),
        ("qwen3-30b-a3b up", 1536, 2048, ((8, 2048, 214.7), (8, 512, 90.4), (32, 256, 126.8), (64, 128, 169.5),
                                          (256, 64, 567.0), (256, 16, 514.1), (256, 128, 542.7))),
        ("qwen3-30b-a3b down", 2048, 768, ((8, 2048, 115.5), (8, 512, 48.8), (32, 256, 75.6), (64, 128, 101.8),
                                           (256, 64, 309.1), (256, 16, 308.9), (256, 128, 316.6))))
    for g, t, us in rows)
# FP8 e4m3 (torch._scaled_mm, per-tensor scales, bf16 output): (M, N, K, FP8 TFLOP/s, bf16 TFLOP/s).
FP8_GEMM_TFLOPS: tuple[tuple[int, int, int, int, int], ...] = (
    (8192, 8192, 8192, 1408, 768), (4096, 4096, 4096, 1106, 683), (8192, 4608, 12288, 1348, 741),
    (8192, 28672, 4096, 1309, 763), (2048, 4096, 7168, 881, 618), (512, 4096, 7168, 657, 487),
    (8192, 1280, 8192, 926, 613),
)


# ---- one H200, 2026-11-26, later: a lone kernel vs queued, grouped GEMMs with uneven tokens, streaming ops ------
# calibration/gpu/queue_and_grouped.py (measured/h200-2026-11-26-queue-grouped.json); torch 2.11.0+cu130.
# (kernel, M, N, K, lone us: events around one call, queued us: events around 50 back-to-back calls / 50).
# Queued kernels shorter than ~18 us are bound by the host's dispatch (eager PyTorch on that machine's CPU).
LONE_QUEUED_US: tuple[tuple[int, int, int, float, float], ...] = (
    (64, 1536, 2048, 30.8, 18.2), (64, 4096, 7168, 38.7, 22.9), (1024, 1024, 1024, 31.5, 17.6),
    (256, 28672, 4096, 115.0, 91.1), (2048, 2048, 2048, 43.4, 25.0), (4096, 4096, 4096, 212.4, 178.6),
)
HOST_BOUND_US = 19.0  # a queued kernel at or under this took the host's dispatch time, not its own


def _spread(total: int, parts: int) -> list[int]:
    """`total` tokens over `parts` experts in multiples of 16, as evenly as that allows (the script's split)."""
    base = total // parts // 16 * 16
    out = [base] * parts
    for i in range((total - base * parts) // 16):
        out[i % parts] += 16
    return out


def _splits(total: int, g: int) -> dict[str, tuple[int, ...]]:
    return {"balanced": (total // g,) * g, "half on one": (total // 2, *_spread(total - total // 2, g - 1)),
            "one busy": (total - 16 * (g - 1),) + (16,) * (g - 1),
            "half empty": (2 * total // g,) * (g // 2) + (0,) * (g - g // 2)}


# torch._grouped_mm at a fixed total of tokens split unevenly: (expert GEMM, N, K, split, tokens per expert,
# grouped us, the busiest expert's GEMM alone us).
GROUPED_SPLIT_US: tuple[tuple[str, int, int, str, tuple[int, ...], float, float], ...] = tuple(
    (name, n, k, split, _splits(total, g)[split], us, alone) for name, n, k, g, total, split, us, alone in (
        ("deepseek-v3 up", 4096, 7168, 32, 8192, "balanced", 692.4, 40.5),
        ("deepseek-v3 up", 4096, 7168, 32, 8192, "half on one", 943.2, 356.2),
        ("deepseek-v3 up", 4096, 7168, 32, 8192, "one busy", 1286.6, 626.9),
        ("deepseek-v3 up", 4096, 7168, 32, 8192, "half empty", 675.8, 55.4),
        ("deepseek-v3 up", 4096, 7168, 8, 4096, "balanced", 346.3, 60.4),
        ("deepseek-v3 up", 4096, 7168, 8, 4096, "half on one", 497.4, 171.3),
        ("deepseek-v3 up", 4096, 7168, 8, 4096, "one busy", 498.6, 343.6),
        ("deepseek-v3 up", 4096, 7168, 8, 4096, "half empty", 337.6, 98.9),
        ("qwen3-30b-a3b up", 1536, 2048, 32, 8192, "balanced", 117.3, 34.3),
        ("qwen3-30b-a3b up", 1536, 2048, 32, 8192, "half on one", 158.0, 61.0),
        ("qwen3-30b-a3b up", 1536, 2048, 32, 8192, "one busy", 182.7, 88.7),
        ("qwen3-30b-a3b up", 1536, 2048, 32, 8192, "half empty", 108.9, 23.8),
        ("qwen3-30b-a3b up", 1536, 2048, 8, 4096, "balanced", 74.1, 22.9),
        ("qwen3-30b-a3b up", 1536, 2048, 8, 4096, "half on one", 74.7, 35.1),
        ("qwen3-30b-a3b up", 1536, 2048, 8, 4096, "one busy", 95.5, 52.4),
        ("qwen3-30b-a3b up", 1536, 2048, 8, 4096, "half empty", 71.9, 27.2)))
# Streaming ops on 8192 x 8192 (lone, us): bytes read + written per element: copy 2, add 3, gelu 2; a fused AdamW
# step over 64M fp32 parameters moves 28 B each. (op, dtype, us)
STREAMING_US: tuple[tuple[str, str, float], ...] = (
    ("copy", "bfloat16", 76.0), ("add", "bfloat16", 103.6), ("gelu", "bfloat16", 102.4), ("copy", "float32", 140.0),
    ("add", "float32", 199.5), ("gelu", "float32", 138.9), ("adamw", "float32", 631.5))
# fp32 SDPA, b 1, 32 heads, s 4096, d 128, causal: (kv heads, allow_tf32, forward us, forward + backward us). With
# GQA (enable_gqa, as the block) torch runs the math backend, whose GEMMs take TF32; MHA runs the memory-efficient
# kernel, which does not.
FP32_ATTENTION_US: tuple[tuple[int, bool, float, float], ...] = (
    (32, False, 3356.9, 13604.5), (8, False, 12720.5, 27111.8), (32, True, 3349.7, 13399.2),
    (8, True, 7938.8, 13712.4))
