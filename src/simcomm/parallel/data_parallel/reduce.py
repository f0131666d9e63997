"""The data-parallel communication of one bucket: all-reduce or reduce-scatter its gradients, all-gather its
parameters. Tagged axis=dp and bucket=i; a group of one rank communicates nothing."""
from __future__ import annotations

from ..rank_comm import Ready


def reduce_gradients(comm, group, size: int, flat, bucket: int, scatter: bool, async_op: bool):
    """The bucket's gradients summed over the group: whole (all-reduce) or this rank's shard (reduce-scatter)."""
    if size == 1:
        return Ready(flat.copy())
    with comm.tagged(axis="dp", bucket=bucket):
        if scatter:
            h = comm.reduce_scatter(flat, group, size, async_op=True)
        else:
            h = comm.all_reduce(flat, group, async_op=True)
    if not async_op:
        h.wait()
    return h


def gather_parameters(comm, group, size: int, shard, bucket: int):
    """The whole flat buffer from every rank's shard (all-gather)."""
    if size == 1:
        return shard.copy()
    with comm.tagged(axis="dp", bucket=bucket):
        return comm.all_gather(shard, group, size)


def _held_pieces(store, names) -> list[tuple]:
    """(flat gradient, lo, hi) of each run of `names` this rank holds."""
    pieces = []
    for b in store.buckets:
        grad = store.held_grad(b)
        lo, hi = store.held_range(b)
        for start, end in b.ranges(names):
            a, z = max(start, lo), min(end, hi)
            if a < z:
                pieces.append((grad, a - lo, z - lo))
    return pieces


def add_held(stores, names) -> None:
    """Sum the held gradients of `names` over several stores of this rank (the tied word embedding where one rank
    holds both ends of the model: ZB-V, DualPipe), each left holding the sum. Their buckets of `names` are alike."""
    for parts in zip(*(_held_pieces(s, names) for s in stores)):
        total = parts[0][0][parts[0][1]:parts[0][2]].copy()
        for g, a, z in parts[1:]:
            total += g[a:z]
        for g, a, z in parts:
            g[a:z] = total


def all_reduce_held(comm, store, names, group, axis: str) -> None:
    """Sum, over another group, the gradients of `names` that this rank holds after its data-parallel reduction
    (whole for DDP, the rank's shard for ZeRO): the sequence-parallel LayerNorm and bias gradients over TP, the
    tied word embedding over the first and last pipeline stage. Peers lay out their buckets alike, so they hold
    the same ranges. One packed all-reduce."""
    from ..rank_comm import pack
    pieces = _held_pieces(store, names)
    if not pieces:
        return
    with comm.tagged(axis=axis):
        total = comm.all_reduce(pack([g[a:z] for g, a, z in pieces]), group)
    at = 0
    for g, a, z in pieces:
        g[a:z] = total[at:at + z - a]
        at += z - a
