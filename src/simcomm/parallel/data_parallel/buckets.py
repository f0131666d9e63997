"""Gradient buckets: parameters laid out in flat buffers, in the order their gradients become final.

As in PyTorch DDP and Megatron's DistributedDataParallel, parameters are taken in reverse forward order (backward
produces their gradients in that order) and packed into flat buffers of about `bucket_size` elements; a bucket's
reduction can start as soon as its last gradient is final. Each buffer is padded to a multiple of the number of
data-parallel ranks, and ZeRO gives rank i the i-th contiguous shard of every buffer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..model.tensor import Meta, is_meta


@dataclass
class Bucket:
    """Where each parameter of one bucket lives in its flat buffer, and this rank's shard of it."""

    index: int
    names: list[str]
    shapes: list[tuple[int, ...]]
    offsets: list[int]
    numel: int  # elements of parameters
    padded: int  # numel rounded up to a multiple of `shards`
    shards: int
    shard_index: int
    units: set

    @property
    def shard_size(self) -> int:
        return self.padded // self.shards

    @property
    def shard(self) -> tuple[int, int]:
        lo = self.shard_index * self.shard_size
        return lo, lo + self.shard_size

    def views(self, flat) -> dict:
        """name -> a view of `flat` shaped like that parameter (size-only tensors for a size-only buffer)."""
        if is_meta(flat):
            return {n: Meta(s, flat.dtype) for n, s in zip(self.names, self.shapes)}
        return {n: flat[o:o + math.prod(s)].reshape(s) for n, s, o in zip(self.names, self.shapes, self.offsets)}

    def ranges(self, names) -> list[tuple[int, int]]:
        """[start, end) in the flat buffer of each of `names` that this bucket holds."""
        where = dict(zip(self.names, zip(self.offsets, self.shapes)))
        return [(where[n][0], where[n][0] + math.prod(where[n][1])) for n in names if n in where]

    def flat_mask(self, flags: dict, dtype) -> np.ndarray:
        """A flat per-element array: flags[name] (0 or 1) over each parameter, 0 in the padding."""
        mask = np.zeros(self.padded, dtype)
        for n, (lo, hi) in zip(self.names, self.ranges(self.names)):
            mask[lo:hi] = flags[n]
        return mask


def make_buckets(order: list[str], shapes: dict, units: dict, bucket_size: int | None, shards: int,
                 shard_index: int, alone: set = frozenset(), by_unit: bool = False) -> list[Bucket]:
    """Buckets over parameters `order` (already in gradient-ready order). A bucket closes once it holds
    bucket_size elements (None: no limit), before a parameter in `alone` (which gets a bucket of its own), and, if
    by_unit, where the unit changes (ZeRO-3 gathers and frees whole units)."""
    groups: list[list[str]] = []
    size = 0
    for name in order:
        n = math.prod(shapes[name])
        new = not groups or name in alone or (groups[-1] and groups[-1][-1] in alone) or \
            (bucket_size is not None and size >= bucket_size) or \
            (by_unit and units[groups[-1][-1]] != units[name])
        if new:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    out = []
    for i, names in enumerate(groups):
        offsets, at = [], 0
        for name in names:
            offsets.append(at)
            at += math.prod(shapes[name])
        padded = -(-at // shards) * shards
        out.append(Bucket(i, names, [tuple(shapes[n]) for n in names], offsets, at, padded, shards, shard_index,
                          {units[n] for n in names}))
    return out
