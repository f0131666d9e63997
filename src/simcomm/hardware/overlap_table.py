"""Compute beside communication on one H200 (132 SMs), measured: shared/reference/h200-overlap-measured.md.

A persistent kernel of k CTAs (8 warps each) on a second stream stood in for a collective's kernel: copying HBM
("copy") or spinning without memory traffic ("spin"), started just before the measured kernel and outlasting it.
Slowdowns are time beside / time alone - 1, in percent, medians of 7 (torch 2.11, CUDA 13.0, bf16). The engine's
SM-sharing model (engine/sharing.py) is checked against these rows and fits one figure to them (TAIL_ROUND).
"""
from __future__ import annotations

SMS = 132
HBM_COPY_RATE = 4.3e12  # the H200's measured device-to-device copy rate (read + write), bytes/s
CTAS = (8, 16, 24, 32, 64)

# The stand-in alone: CTAs -> GB/s it copies (read + write).
COPY_GBPS = {8: 154, 16: 300, 24: 438, 32: 566, 64: 1003, 132: 1773}

# bf16 GEMM (M x K) @ (K x N): (M, N, K, us alone, copy slowdown % by CTAS, spin slowdown % by CTAS,
# the 24-CTA copy's own slowdown % beside the GEMM).
GEMM_ROWS: tuple[tuple[int, int, int, float, tuple[int, ...], tuple[int, ...], int], ...] = (
    (8192, 4608, 12288, 1152.9, (27, 30, 31, 38, 108), (28, 34, 33, 40, 104), 14),
    (8192, 12288, 1536, 421.2, (26, 32, 32, 46, 101), (19, 29, 30, 46, 100), 24),
    (8192, 6144, 12288, 1576.4, (17, 23, 23, 36, 93), (18, 24, 22, 35, 92), 19),
    (8192, 12288, 6144, 1553.2, (11, 21, 25, 38, 92), (13, 19, 19, 31, 83), 21),
    (8192, 1280, 8192, 252.2, (87, 77, 74, 70, 105), (70, 69, 67, 66, 104), 15),
    (8192, 7168, 8192, 1239.4, (7, 17, 17, 31, 84), (11, 21, 21, 35, 83), 20),
    (8192, 8192, 8192, 1476.4, (12, 23, 22, 32, 80), (10, 20, 20, 27, 76), 18),
    (2048, 12288, 6144, 475.6, (24, 10, 20, 30, 79), (22, 21, 20, 31, 76), 19),
    (4096, 28672, 4096, 1211.0, (11, 21, 22, 36, 88), (10, 20, 20, 32, 86), 22),
)

# Flash attention forward + backward (SDPA, causal, bf16, head dim 128): (batch, heads, kv heads, sequence, us
# alone, copy slowdown % at 16/24/32 CTAs, spin slowdown % at 16/24/32 CTAs).
ATTENTION_CTAS = (16, 24, 32)
ATTENTION_ROWS: tuple[tuple[int, int, int, int, float, tuple[int, ...], tuple[int, ...]], ...] = (
    (1, 12, 12, 2048, 285.9, (101, 167, 68), (77, 100, 85)),
    (1, 32, 8, 8192, 3609.8, (15, 22, 29), (13, 19, 27)),
    (1, 64, 8, 4096, 2039.3, (12, 19, 26), (10, 16, 25)),
)

# The same on one H100 SXM (132 SMs, HBM3 3.0 TB/s copy; torch 2.11, CUDA 13.0, triton 3.6), measured with a
# compact form of calibration/overlap/measure_overlap.py on this project's lent nvidia-h100-x1 machine, one run,
# medians of 7: (M, N, K, us alone, copy % by CTAS, spin % by CTAS). Three TP-sharded shapes of Llama-3-70B-like
# layers added (N = 1024; K = 1024; K = 3584).
H100_HBM_COPY_RATE = 3.0e12
H100_COPY_GBPS = {8: 200, 16: 383, 24: 557, 32: 716, 64: 1285, 132: 2039}
H100_GEMM_ROWS: tuple[tuple[int, int, int, float, tuple[int, ...], tuple[int, ...]], ...] = (
    (8192, 4608, 12288, 1159.9, (19, 28, 33, 55, 115), (18, 26, 26, 41, 93)),
    (8192, 12288, 1536, 438.9, (5, 15, 17, 32, 89), (4, 14, 13, 28, 79)),
    (8192, 6144, 12288, 1599.5, (14, 19, 20, 47, 110), (16, 20, 21, 37, 97)),
    (8192, 12288, 6144, 1563.4, (11, 32, 31, 50, 110), (10, 21, 26, 45, 100)),
    (8192, 1280, 8192, 231.9, (82, 82, 81, 80, 125), (81, 77, 76, 73, 113)),
    (8192, 7168, 8192, 1207.1, (11, 25, 28, 51, 108), (13, 21, 20, 38, 98)),
    (8192, 8192, 8192, 1414.2, (12, 34, 31, 45, 105), (12, 23, 24, 39, 93)),
    (2048, 12288, 6144, 437.4, (15, 14, 14, 25, 79), (14, 13, 13, 25, 75)),
    (4096, 28672, 4096, 1230.2, (10, 23, 24, 43, 107), (11, 19, 32, 46, 107)),
    (8192, 1024, 8192, 187.7, (83, 83, 83, 77, 118), (78, 77, 77, 76, 116)),
    (8192, 8192, 1024, 204.1, (7, 17, 16, 30, 83), (6, 15, 14, 29, 76)),
    (8192, 8192, 3584, 639.8, (10, 21, 22, 32, 93), (10, 21, 20, 31, 84)),
)
# Flash attention forward + backward on the H100: (batch, heads, kv heads, sequence, us alone, copy % at 16/24/32,
# spin % at 16/24/32); the short row is not slowed there (-3 to -12%: noise around none).
H100_ATTENTION_ROWS: tuple[tuple[int, int, int, int, float, tuple[int, ...], tuple[int, ...]], ...] = (
    (1, 32, 8, 8192, 3789.2, (10, 15, 22), (11, 17, 23)),
    (1, 64, 8, 4096, 2165.4, (6, 13, 21), (6, 11, 19)),
    (1, 12, 12, 2048, 299.4, (-9, -4, -3), (-12, -6, -6)),
)
