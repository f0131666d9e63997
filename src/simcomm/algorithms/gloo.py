"""torch's CPU backend (ProcessGroupGloo, torch 2.13) as plans whose results match real gloo bitwise.

Everything below was measured against real torch.distributed gloo (processes on one host, float16/32/64, int8/32/64,
uint8, bool, N = 2..8, 1 element to 32 MB); tests/backends/ re-checks it against real gloo.

all_reduce (dense CPU tensor, every size and N): gloo's ring (gloo/allreduce.cc), never another algorithm.
- Rank r sends to r-1 and receives from r+1. The buffer is cut into segments:
    numSegments  = roundUp(max(ceil(bytes / 1 MiB), 2N), N)          (maxSegmentBytes = 1 MiB = 1048576)
    segmentBytes = roundUp(ceil(bytes / numSegments), itemsize)
  and chunk c (owned by rank c) is the numSegments/N consecutive segments starting at segment c*numSegments/N.
  So chunk c covers elements [c*E, (c+1)*E) with E = numSegments/N * segmentBytes/itemsize, cut at the end of the
  tensor; the last chunks can be short or empty (count=10, N=4: chunks of 4, 4, 2, 0 elements, not 3, 3, 3, 1).
- Reduce-scatter: at stage s rank r sends chunk r+1+s; the receiver combines out = op(local, incoming), so
  chunk c is reduced as x[c] op (x[c+1] op (... op (x[c-2] op x[c-1]))), ranks mod N (N=2: any order is the same).
  All-gather: the finished chunks are copied around the ring, so every rank ends bitwise identical.
- The combine is elementwise: SUM a+b (for a NaN, the payload of the local operand a wins), PRODUCT a*b,
  MAX std::max(a, b) = b if a < b else a, MIN std::min(a, b) = b if b < a else a (so NaN and -0.0/+0.0 results
  depend on the order; numpy's maximum/minimum would differ), BAND/BOR/BXOR bitwise. float16 adds in float and
  rounds (as numpy does). bool SUM adds the bytes (the result bytes are counts mod 256, not 0/1); bool PRODUCT and
  MAX/MIN are AND/OR. Complex tensors (SUM/AVG only) are reduced as their real view (2 floats per element).
- AVG = the SUM above, then `tensor /= N` in the tensor's dtype (one rounding). Integer AVG raises in torch 2.13
  ("result type Float can't be cast to the desired output type Long"); it is not a truncating division.
- A subgroup runs the same ring over its group ranks.

reduce (gloo/reduce.cc): the same ring reduce-scatter and combine (rank r sends to r-1), then every rank sends its
finished chunk to the root; the root's result equals all_reduce's bitwise EXCEPT that the segment size differs:
    numSegments  = roundUp(max(ceil(bytes / 1 MiB), 2N), N)
    segmentBytes = min(1 MiB, roundUp(ceil(bytes / 2N), itemsize))
(the two agree up to 2N MiB; above, reduce's chunks are whole MiB: 10 MB float32 over N=3 -> 4 MiB chunks, where
all_reduce has 3.33 MB chunks). Non-root tensors are left with gloo's partial sums: on rank r, chunk c != r+1
holds x[r] op (x[r+1] op (... op x[c-1])) (chunk r: the full result) and chunk r+1 keeps x[r], except that the
segment loop runs numSegments - 2 times, i.e. numSegments/N - 2 segments past the reduce-scatter, so the first
numSegments/N - 2 segments of chunk r+1 hold x[r] op full(chunk r+1) (only when bytes > 2N MiB). AVG divides the
root's sum by N.

reduce_scatter: both forms are all_reduces, then each rank keeps its block:
- reduce_scatter_tensor (flat input of N*count): ONE all_reduce of the whole N*count input (segments over N*count).
- reduce_scatter (list of N tensors): each input block is all-reduced on its own (segments over count), i.e. block
  j gets exactly the all_reduce(block j) result. The op is honoured (MAX gives max: the "always sums" quirk
  reported in pytorch#162338 does not show in 2.13). AVG = SUM / N as for all_reduce.

broadcast, all_gather (list and into_tensor), gather, scatter, all_to_all (list and single), send/recv: exact
byte copies, no arithmetic (checked bitwise on random float32, including odd sizes).

The plans here yield one step per ring stage (2(N-1) for all_reduce) like ring.py: inside a stage gloo streams the
stage's chunk as numSegments/N segments with two in flight, which the lockstep executor folds into one transfer.
"""
from __future__ import annotations

import numpy as np

from .fold import fold
from .plan import Buffers, Collective, step

MAX_SEGMENT_BYTES = 1 << 20  # gloo's maxSegmentSize default (measured: 1 MiB)


def _round_up(a: int, b: int) -> int:
    return -(-a // b) * b


def segmentation(count: int, n: int, itemsize: int, kind: str = "all_reduce") -> tuple[int, int, int]:
    """(numSegments, segmentBytes, elements per chunk) of gloo's ring for `count` elements of `itemsize` on n ranks.

    kind "all_reduce" (also reduce_scatter) or "reduce" (reduce.cc caps segments at 1 MiB instead of evening them).
    """
    total = count * itemsize
    max_seg = itemsize * max(1, MAX_SEGMENT_BYTES // itemsize)
    num = _round_up(max(-(-total // max_seg), 2 * n), n)
    if kind == "reduce":
        seg = min(max_seg, _round_up(-(-total // (2 * n)), itemsize))
    else:
        seg = _round_up(-(-total // num), itemsize)
    return num, seg, (num // n) * (seg // itemsize)


def chunk_owner(count: int, n: int, itemsize: int, kind: str = "all_reduce") -> np.ndarray:
    """The rank owning (finishing the reduction of) each element in gloo's ring."""
    per = segmentation(count, n, itemsize, kind)[2]
    if per == 0:
        return np.zeros(count, dtype=np.int64)
    return np.minimum(np.arange(count) // per, n - 1)


def gloo_combine(op, local: np.ndarray, incoming: np.ndarray) -> np.ndarray:
    """gloo's reduction function out = f(local, incoming), elementwise, with its operand order and C++ semantics."""
    name = op.name
    if local.dtype == np.bool_:
        if name in ("SUM", "AVG"):  # gloo::sum<bool> adds the bytes
            return (local.view(np.uint8) + incoming.view(np.uint8)).view(np.bool_)
        if name in ("PRODUCT", "MIN", "BAND"):
            return np.logical_and(local, incoming)
        if name in ("MAX", "BOR"):
            return np.logical_or(local, incoming)
        return np.logical_xor(local, incoming)
    if name in ("SUM", "AVG"):
        return local + incoming
    if name == "PRODUCT":
        return local * incoming
    if name == "MAX":  # std::max(a, b): (a < b) ? b : a
        return np.where(local < incoming, incoming, local)
    if name == "MIN":  # std::min(a, b): (b < a) ? b : a
        return np.where(incoming < local, incoming, local)
    if name == "BAND":
        return local & incoming
    if name == "BOR":
        return local | incoming
    if name == "BXOR":
        return local ^ incoming
    raise ValueError(f"gloo has no reduction {name}")


def _real(rows: np.ndarray | None, coll: Collective, count: int) -> tuple[np.ndarray | None, int, int]:
    """Complex tensors are reduced as their real view: (rows, elements, itemsize) as gloo sees them."""
    if coll.dtype.kind == "c":
        real = np.dtype(f"f{coll.itemsize // 2}")
        return (None if rows is None else np.ascontiguousarray(rows).view(real)), 2 * count, real.itemsize
    return rows, count, coll.itemsize


def _padded(rows: np.ndarray, parts: int, per: int) -> np.ndarray:
    """rows (..., count) as (..., parts, per), zero-padded at the end (padding only meets padding)."""
    count = rows.shape[-1]
    out = np.zeros(rows.shape[:-1] + (parts * per,), dtype=rows.dtype)
    out[..., :count] = rows
    return out.reshape(rows.shape[:-1] + (parts, per))


def _ring(coll: Collective, buf: Buffers, blocks: int, block_count: int, kind: str, gather: bool):
    """gloo's ring over `blocks` independent vectors of block_count elements per rank (rows (n, blocks*count)).

    Yields the reduce-scatter stages, then either the all-gather stages (gather=True) or the gather to the root.
    Returns the work array (n, blocks, chunks holding data, elements per chunk) or None for size-only runs: a few
    floats on many ranks leave most chunks empty, and those never move any data.
    """
    n = coll.n
    rows, count, itemsize = _real(buf.rows if buf.live else None, coll, block_count)
    per = segmentation(count, n, itemsize, kind)[2]
    true = np.clip(count - per * np.arange(n), 0, per) * blocks * itemsize  # bytes of each chunk, all blocks
    work = None
    if rows is not None:
        work = _padded(np.ascontiguousarray(rows).reshape(n, blocks, count), int((true > 0).sum()), per)
    r = np.arange(n)
    left = (r - 1) % n
    # Every stage is the first one's chunk sizes moved one rank on (at stage s rank r sends chunk r+1+s): one step
    # repeated n-1 times, rotating its sizes unless the chunks are equal (the executor times either at once).
    even = bool((true == true[0]).all())
    one = "" if even or n > 2 else " 1/1"  # a single stage keeps its number, as when each stage was a step
    yield step(r, left, true[0] if even else np.roll(true, -1), reduce=True, repeat=n - 1, rotate=0 if even else 1,
               label="reduce-scatter" + one)
    _phase(work, buf.op, n, reduce=True)
    if gather:
        yield step(r, left, true[0] if even else true, repeat=n - 1, rotate=0 if even else 1, label="all-gather" + one)
        _phase(work, buf.op, n, reduce=False)
    else:
        # reduce.cc runs its segment loop numSegments - 2 times, (numSegments/N - 2) segments past the
        # reduce-scatter: rank r sends the head of its finished chunk r to r-1, which adds it to its chunk r.
        num, seg, _ = segmentation(count, n, itemsize, kind)
        head = (num // n - 2) * (seg // itemsize)
        if head > 0:
            head_bytes = np.clip(count - per * np.arange(n), 0, head) * blocks * itemsize
            yield step(r, left, head_bytes, reduce=True, label="reduce-scatter overrun")
            if work is not None:
                c = np.arange(work.shape[2])  # rank c's finished chunk c, to rank c-1
                work[c - 1, :, c, :head] = gloo_combine(buf.op, work[c - 1, :, c, :head], work[c, :, c, :head])
        root = coll.root
        others = r[r != root]
        yield step(others, np.full(len(others), root), true[others], label="gather to root")
        if work is not None:
            held = others[others < work.shape[2]]
            work[root, :, held] = work[held, :, held]
    return work


def _phase(work: np.ndarray | None, op, n: int, reduce: bool) -> None:
    """A phase's data, stage by stage: at stage s rank c-1-s (reduce-scatter: its receiver combines, local op
    incoming) or c-s (all-gather: a copy) sends chunk c to the rank before it; only the chunks holding data."""
    if work is None:
        return
    chunks = np.arange(work.shape[2])
    for s in range(n - 1):
        src = (chunks - (1 + s if reduce else s)) % n
        dst = (src - 1) % n
        work[dst, :, chunks] = gloo_combine(op, work[dst, :, chunks], work[src, :, chunks]) if reduce else \
            work[src, :, chunks]


def _store(coll: Collective, buf: Buffers, work: np.ndarray | None, count: int) -> None:
    if work is None:
        return
    n = coll.n
    flat = np.ascontiguousarray(work.reshape(n, work.shape[1], -1)[:, :, :count]).reshape(n, -1)
    if coll.dtype.kind == "c":
        flat = flat.view(coll.dtype)
    buf.rows = flat


def gloo_all_reduce(coll: Collective, buf: Buffers):
    """gloo's ring all_reduce: rows (n, count); every rank ends with the same, gloo-bitwise result.

    From the ranks' own arrays (buf.unstacked) the result is folded chunk by chunk in gloo's order (fold.py)."""
    if coll.n == 1:
        return
    if buf.unstacked:
        yield from _ring(coll, Buffers(None, buf.op), 1, coll.count, "all_reduce", gather=True)  # the timing
        n = coll.n
        real = np.dtype(f"f{coll.itemsize // 2}") if coll.dtype.kind == "c" else coll.dtype
        sources = [src.view(real) for src in buf.sources]
        count = _real(None, coll, coll.count)[1]
        per = segmentation(count, n, real.itemsize)[2]
        # Chunk c is reduced over ranks c-1, c-2, ..., c: the ring n-1, n-2, ..., 0 from position n - c.
        chunks = np.arange(n)
        ring = [(n - 1 - chunks, chunks, (n - chunks) % n)]
        result = fold(sources, count, per, ring, _gloo_into(buf.op)).view(coll.dtype)
        buf.rows = np.broadcast_to(result, (n, coll.count))
        return
    work = yield from _ring(coll, buf, 1, coll.count, "all_reduce", gather=True)
    _store(coll, buf, work, _real(None, coll, coll.count)[1])


def _gloo_into(op):
    """gloo_combine writing into `out` (in place for the arithmetic ops, which are one ufunc each)."""
    def into(local: np.ndarray, incoming: np.ndarray, out: np.ndarray) -> None:
        if local.dtype != np.bool_ and op.name in ("SUM", "AVG"):
            np.add(local, incoming, out=out)
        elif local.dtype != np.bool_ and op.name == "PRODUCT":
            np.multiply(local, incoming, out=out)
        else:
            out[...] = gloo_combine(op, local, incoming)
    return into


def gloo_reduce_scatter(coll: Collective, buf: Buffers, flat: bool = True):
    """rows (n, n*count). flat=True: reduce_scatter_tensor, one all_reduce of all n*count elements; flat=False:
    list reduce_scatter, each block all-reduced on its own. Every row ends with the full reduction (rank i keeps
    block i)."""
    n = coll.n
    if n == 1:
        return
    blocks, block = (1, n * coll.count) if flat else (n, coll.count)
    work = yield from _ring(coll, buf, blocks, block, "all_reduce", gather=True)
    _store(coll, buf, work, _real(None, coll, block)[1])


def gloo_reduce_scatter_list(coll: Collective, buf: Buffers):
    """reduce_scatter with a list of inputs (each block its own all_reduce)."""
    return gloo_reduce_scatter(coll, buf, flat=False)


def gloo_reduce(coll: Collective, buf: Buffers):
    """gloo's reduce: ring reduce-scatter (reduce.cc segments), then each rank sends its chunk to the root.

    The root's row holds the result; the other rows hold the partial sums gloo leaves in their tensors.
    """
    if coll.n == 1:
        return
    work = yield from _ring(coll, buf, 1, coll.count, "reduce", gather=False)
    _store(coll, buf, work, _real(None, coll, coll.count)[1])


def gloo_reference(xs: np.ndarray, op, kind: str = "all_reduce") -> np.ndarray:
    """Closed form of gloo's per-element association: xs (n, count) -> the finished (n, count) rows.

    kind "all_reduce": every row is the result. kind "reduce": root-independent chunk results as all_reduce but
    with reduce.cc's segments (only the root's row is the result; partial sums are not modelled here).
    """
    n, count = xs.shape
    own = chunk_owner(count, n, xs.dtype.itemsize, kind)
    idx = np.arange(count)
    acc = xs[(own - 1) % n, idx]
    for k in range(2, n + 1):
        acc = gloo_combine(op, xs[(own - k) % n, idx], acc)
    return np.broadcast_to(acc, (n, count)).copy()
