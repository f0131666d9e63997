"""Compute and communication share a GPU: how much a kernel slows while communication kernels hold some of the
GPU's SMs, and how much those kernels' own transfers slow beside compute (docs/model.md, "Compute and
communication share the GPU"; measured: shared/reference/h200-overlap-measured.md).

A communication kernel (an NCCL collective, a point-to-point send, Transformer Engine's userbuffers) keeps one CTA
per channel resident on every GPU it runs on for as long as it runs, copying or spinning on a flag alike, so its
SMs are not there for the compute stream. What that costs a compute kernel depends on how it fills the GPU:

- a GEMM (cuBLAS-like tiles of TILE_M x TILE_N outputs, one CTA each): with many tiles the grid runs in waves,
  ceil(tiles / SMs free) of them instead of ceil(tiles / SMs), so a few missing SMs add a partial wave; a product
  of fewer than PERSISTENT_WAVES waves runs as a persistent (stream-K) grid of one CTA per SM, whose CTAs that find
  no free SM wait for a second round (which runs lighter than the first: TAIL_ROUND of it, fitted to the
  measured thin GEMM);
- flash attention: a grid of one CTA per 128 queries of every (batch, head), in waves;
- a memory-bound kernel: it needs few SMs to saturate HBM, so it loses only the bandwidth the communication
  kernels take (COMM_CTA_HBM bytes/s per CTA, the stand-in's measured copy rate);
- work of unknown shape (a plain `seconds=` compute): spread evenly over the SMs, so it slows as SMs / SMs free.

Every kernel also has a share of its time bound by HBM, which slows by the bandwidth the communication takes.
Compute beside the communication slows the communication's own copies by COMM_BESIDE_COMPUTE (the table's mean;
the engine applies it to transfers inside a node, which the kernel's CTAs drive; across nodes they wait on the
NIC, far slower than the CTAs).

Transformer Engine's userbuffers tell cuBLAS how many SMs they hold (`set_sm_margin`): a GEMM beside them is sized
for the SMs left (`margin`), so a persistent grid needs no second round there.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware import overlap_table as measured

TILE_M, TILE_N = 128, 256  # bf16 GEMM tile of cuBLAS/CUTLASS on Hopper (128x256x64, warp-specialised)
PERSISTENT_WAVES = 4  # products of fewer waves of tiles run one persistent CTA per SM (stream-K)
TAIL_ROUND = 0.6734  # a persistent grid's lightest second round, relative to its first (fit_tail_round())
ATTENTION_ROWS = 128  # query rows per flash-attention CTA (FlashAttention-2/3 forward and backward)
# HBM bytes/s (read + write) one communication CTA moves: the stand-in's copy rate with 24 CTAs, per CTA
COMM_CTA_HBM = measured.COPY_GBPS[24] * 1e9 / 24
# How much longer a communication kernel's copies take beside a compute kernel: the mean over the measured GEMMs
COMM_BESIDE_COMPUTE = sum(row[-1] for row in measured.GEMM_ROWS) / len(measured.GEMM_ROWS) / 100
HBM_SHARE_CAP = 0.9  # communication never takes more of HBM than this

GEMM, ATTENTION, MEMORY, SPREAD, IDLE = "gemm", "attention", "memory", "spread", "idle"


@dataclass(frozen=True)
class Kernel:
    """What the engine needs to know of a compute kernel to slow it: its kind, its grid (`tiles`: CTAs of one
    tile each; 0 for kinds without a grid) and the share of its time bound by HBM bandwidth (`memory`, 0-1).

    IDLE is time the compute stream spends waiting (exposed communication inside a replayed layer): it does not
    slow."""

    kind: str
    tiles: int = 0
    memory: float = 0.0


SPREAD_KERNEL = Kernel(SPREAD)
IDLE_KERNEL = Kernel(IDLE)
MEMORY_KERNEL = Kernel(MEMORY, memory=1.0)


def gemm_kernel(m: float, n: float, k: float, seconds: float = 0.0, hbm_rate: float = 0.0,
                elem: int = 2) -> Kernel:
    """A GEMM (m x k) @ (k x n): its tiles (the longer output side along the tile's long side) and, given its
    seconds alone and the HBM rate, the share of that time its operands' traffic takes."""
    long_side, short_side = max(m, n), min(m, n)
    tiles = math.ceil(long_side / TILE_N) * math.ceil(short_side / TILE_M)
    memory = 0.0
    if seconds > 0 and hbm_rate > 0:
        memory = min(1.0, elem * (m * k + k * n + m * n) / hbm_rate / seconds)
    return Kernel(GEMM, int(tiles), memory)


def attention_kernel(batch_heads: float, queries: float) -> Kernel:
    """Flash attention over batch_heads = batch x heads and `queries` rows: one CTA per 128 rows of each."""
    return Kernel(ATTENTION, int(batch_heads * math.ceil(queries / ATTENTION_ROWS)))


def slowdown(kernel: Kernel, held: int, margin: int, sms: int, hbm_rate: float) -> float:
    """Time of `kernel` beside communication holding `held` of the GPU's `sms` SMs (of which `margin` the
    kernel was sized around), over its time alone: >= 1, exactly 1 with nothing held."""
    if held <= 0 or kernel.kind == IDLE:
        return 1.0
    free = max(sms - held, 1)
    taken = min(HBM_SHARE_CAP, held * COMM_CTA_HBM / hbm_rate) if hbm_rate > 0 else 0.0
    if kernel.kind == MEMORY:
        return 1.0 / (1.0 - taken)
    if kernel.kind == SPREAD or not kernel.tiles:
        return sms / free
    sized = max(sms - margin, 1)  # the SMs the kernel's grid was sized for
    tiles = kernel.tiles
    if kernel.kind == GEMM and tiles < PERSISTENT_WAVES * sized:
        sm = sms / sized * persistent_rounds(sized, free)
    else:
        sm = math.ceil(tiles / free) / math.ceil(tiles / sms)
    # the kernel's HBM traffic overlaps its math: it bounds the time only where the communication's share of
    # HBM makes it the longer of the two
    return max(sm, kernel.memory / (1.0 - taken))


def persistent_rounds(grid: int, free: int) -> float:
    """Time of a persistent grid of `grid` CTAs (one per SM it was sized for) on `free` SMs, in rounds of the
    full grid: the CTAs that find no SM run after the first round, lighter the fewer they are (fewer CTAs share
    the GPU's clock and HBM: TAIL_ROUND alone, a full round when as many run as in the first)."""
    full, last = divmod(grid, free)
    if not full:
        return 1.0
    return full + (TAIL_ROUND + (1.0 - TAIL_ROUND) * last / free if last else 0.0)


def fit_tail_round() -> float:
    """TAIL_ROUND by least squares on the measured persistent GEMMs' slowdowns (copy and spin alike, every CTA
    count): the model is linear in it."""
    num = den = 0.0
    for m, n, k, us, copy, spin, _ in measured.GEMM_ROWS:
        kernel = gemm_kernel(m, n, k)
        if kernel.tiles >= PERSISTENT_WAVES * measured.SMS:
            continue
        for ctas, a, b in zip(measured.CTAS, copy, spin):
            free = measured.SMS - ctas
            full, last = divmod(measured.SMS, free)
            base = full - 1.0 + last / free  # the slowdown at TAIL_ROUND = 0, and its slope in TAIL_ROUND
            slope = 1.0 - last / free if last else 0.0
            for y in (a / 100, b / 100):
                num += slope * (y - base)
                den += slope * slope
    return num / den


__all__ = ["ATTENTION", "COMM_BESIDE_COMPUTE", "GEMM", "IDLE", "IDLE_KERNEL", "Kernel", "MEMORY", "MEMORY_KERNEL",
           "SPREAD", "SPREAD_KERNEL", "attention_kernel", "gemm_kernel", "slowdown"]
