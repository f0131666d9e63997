"""Compute beside a stand-in for a collective's kernel on one GPU: the H100 counterpart of
shared/reference/h200-overlap-measured.md (which the SM-sharing model, src/simcomm/engine/sharing.py, is checked
against). Needs torch with CUDA and triton; about a minute on an H100.

    python calibration/overlap/measure_overlap.py            # prints the tables as Markdown
    python calibration/overlap/measure_overlap.py --quick    # fewer shapes

A persistent Triton kernel of k CTAs (8 warps each) on a second stream stands in for NCCL's kernel (one CTA per
channel, resident for as long as the collective runs): it either copies HBM ("copy") or spins on a flag without
memory traffic ("spin"). It is launched first, a short sleep on the measuring stream lets it become resident, then
the measured kernel runs (CUDA events around it); the stand-in stops when a flag is set after the measured kernel.
Medians of 7. The stand-in's own copy rate is measured alone and beside each GEMM (its bytes over the GEMM's span).

Two things keep the spinning stand-in from hanging the GPU: CUDA loads every kernel's module at start
(CUDA_MODULE_LOADING=EAGER; loading one lazily while the stand-in spins waits for it to end), and all work runs on
created streams (the legacy default stream would wait for the stand-in). A compact form of this script measured
the H100 rows in src/simcomm/hardware/overlap_table.py (H100_GEMM_ROWS) on 2026-11 in about 15 s.
"""
from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

CTAS = (0, 8, 16, 24, 32, 64)
GEMMS = ((8192, 4608, 12288), (8192, 12288, 1536), (8192, 6144, 12288), (8192, 12288, 6144), (8192, 1280, 8192),
         (8192, 7168, 8192), (8192, 8192, 8192), (2048, 12288, 6144), (4096, 28672, 4096))
ATTENTION = ((1, 12, 12, 2048), (1, 32, 8, 8192), (1, 64, 8, 4096))  # batch, heads, kv heads, sequence; d = 128
BLOCK = 4096  # elements each stand-in CTA copies per iteration (bf16: 8 KiB read + 8 KiB written)
REPS = 7


@triton.jit
def _stand_in(flag, src, dst, count, per_cta, COPY: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = pid * per_cta
    offs = tl.arange(0, BLOCK)
    i = 0
    while tl.load(flag, volatile=True) == 0:
        if COPY:
            at = base + (i % (per_cta // BLOCK)) * BLOCK
            x = tl.load(src + at + offs)
            tl.store(dst + at + offs, x)
        i += 1
    tl.atomic_add(count, i)


class StandIn:
    """k CTAs on their own stream until stop()."""

    def __init__(self, per_cta: int = 1 << 22):
        self.flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.count = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.per_cta = per_cta
        self.src = torch.randn(64 * per_cta, device="cuda").to(torch.bfloat16)
        self.dst = torch.empty_like(self.src)
        self.stream = torch.cuda.Stream()

    def start(self, ctas: int, copy: bool) -> None:
        self.flag.zero_()
        self.count.zero_()
        torch.cuda.synchronize()
        self.begin, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            self.begin.record()
            _stand_in[(ctas,)](self.flag, self.src, self.dst, self.count, self.per_cta, COPY=copy, BLOCK=BLOCK,
                               num_warps=8)
            self.end.record()

    def stop(self) -> tuple[int, float]:
        """Set the flag (on the current stream, after what was queued there); returns (iterations done, seconds
        the stand-in ran)."""
        self.flag.fill_(1)
        torch.cuda.synchronize()
        return int(self.count.item()), self.begin.elapsed_time(self.end) * 1e-3


def timed(fn, stand_in: StandIn | None, ctas: int, copy: bool, alone_rate: float = 0.0) -> tuple[float, float]:
    """(median microseconds of fn beside the stand-in, the stand-in's GB/s while fn ran when copying: its bytes
    less what it copied at `alone_rate` outside fn's span, over the span)."""
    times, rates = [], []
    for _ in range(REPS):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if ctas:
            stand_in.start(ctas, copy)
            torch.cuda._sleep(200_000)  # ~0.1 ms: the stand-in's CTAs become resident first
        begin.record()
        fn()
        end.record()
        iters, ran = stand_in.stop() if ctas else (0, 0.0)
        torch.cuda.synchronize()
        us = begin.elapsed_time(end) * 1e3
        times.append(us)
        outside = alone_rate * 1e9 * max(ran - us * 1e-6, 0.0)
        rates.append((iters * BLOCK * 4 - outside) / (us * 1e-6) / 1e9 if copy else 0.0)
    return statistics.median(times), statistics.median(rates)


def copy_rate_alone(stand_in: StandIn, ctas: int, seconds: float = 0.02) -> float:
    """GB/s (read + write) the stand-in's k CTAs copy alone."""
    stand_in.start(ctas, True)
    torch.cuda._sleep(int(seconds * 1.5e9))
    iters, ran = stand_in.stop()
    return iters * BLOCK * 4 / ran / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="three GEMMs, two attention rows")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.cuda.set_stream(torch.cuda.Stream())  # never the legacy default stream (see the docstring)
    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}: {props.multi_processor_count} SMs, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, triton {triton.__version__}\n")
    s = StandIn()
    s.flag.fill_(0)
    torch.cuda._sleep(10)  # load the kernels stop() and timed() use before anything spins
    torch.cuda.synchronize()
    for copy in (True, False):  # compile both
        s.start(8, copy)
        s.stop()
    rates = {k: copy_rate_alone(s, k) for k in CTAS[1:] + (props.multi_processor_count,)}
    print("| CTAs | " + " | ".join(str(k) for k in rates) + " |\n|---|" + "---|" * len(rates))
    print("| GB/s | " + " | ".join(f"{r:.0f}" for r in rates.values()) + " |\n", flush=True)
    gemms = GEMMS[4:7] if args.quick else GEMMS
    heads = [f"copy{k}" for k in CTAS[1:]] + [f"spin{k}" for k in CTAS[1:]]
    print("| M | N | K | alone us | " + " | ".join(heads) + " | copy 24 CTAs' own slowdown beside the GEMM |")
    print("|---" * (5 + len(heads)) + "|")
    for m, n, k in gemms:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        fn = lambda: torch.matmul(a, b)  # noqa: E731
        for _ in range(3):
            fn()
        alone, _ = timed(fn, s, 0, False)
        cells = []
        for copy in (True, False):
            for ctas in CTAS[1:]:
                us, rate = timed(fn, s, ctas, copy)
                cells.append(f"+{us / alone - 1:.0%}")
        _, beside = timed(fn, s, 24, True, rates[24])
        own = rates[24] / beside - 1 if beside > 0 else float("nan")
        print(f"| {m} | {n} | {k} | {alone:.1f} | " + " | ".join(cells) + f" | +{own:.0%} |", flush=True)
    print("\n| batch | heads | kv heads | seq | alone us | copy16 | copy24 | copy32 | spin16 | spin24 | spin32 |")
    print("|---" * 11 + "|")
    for batch, h, kv, seq in (ATTENTION[1:] if args.quick else ATTENTION):
        q = torch.randn(batch, h, seq, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        kk = torch.randn(batch, kv, seq, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(batch, kv, seq, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        grad = torch.randn(batch, h, seq, 128, device="cuda", dtype=torch.bfloat16)

        def fn():
            out = torch.nn.functional.scaled_dot_product_attention(q, kk, v, is_causal=True, enable_gqa=kv != h)
            out.backward(grad)
        for _ in range(3):
            fn()
        alone, _ = timed(fn, s, 0, False)
        cells = [f"+{timed(fn, s, ctas, copy)[0] / alone - 1:.0%}" for copy in (True, False) for ctas in (16, 24, 32)]
        print(f"| {batch} | {h} | {kv} | {seq} | {alone:.1f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
