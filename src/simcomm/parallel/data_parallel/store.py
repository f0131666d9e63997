"""What every data-parallel parameter store shares: the buckets, which gradients are final, and the interface a
GPTChunk uses (param, grad, begin, end).

A *round* is the stretch of backward passes whose gradients are reduced together: the whole step for DDP and
ZeRO-1 (gradients accumulate over the microbatches, then are reduced once), every microbatch for ZeRO-2 and
ZeRO-3 (each microbatch's gradients are reduce-scattered into the shard at once, so no rank keeps them whole).
When a unit's backward ends the last pass of a round, its parameters' gradients are final; a bucket whose
gradients are all final is reduced (at once if overlap_grad_reduce, as DDP does during backward; else at the end).
"""
from __future__ import annotations

import math

from ..model.gpt import BACKWARD, FORWARD
from ..model.tensor import zeros
from .buckets import Bucket, make_buckets
from .reduce import reduce_gradients
from .sharding import SCHEMES


class DataParallelStore:
    """Base class. Subclasses choose where parameters and gradients live and how buckets are reduced."""

    sharding = SCHEMES[0]

    @property
    def scatter(self) -> bool:
        """Reduce-scatter (ZeRO) rather than all-reduce (DDP)."""
        return self.sharding.reduce_scatter

    def __init__(self, comm, group, size: int, index: int, units: dict, params: dict, specs: dict,
                 optimizer, bucket_size: int | None = None, overlap: bool = False, alone=frozenset(),
                 size_only: bool = False):
        self.comm, self.group, self.size, self.index = comm, group, size, index
        self.units = units
        self.unit_of = {n: u for u, names in units.items() for n in names}
        self.specs = specs
        self.optimizer = optimizer
        self.overlap = overlap
        self.size_only = size_only
        forward = [n for names in units.values() for n in names]
        shapes = {n: tuple(params[n].shape) for n in forward}
        self.dtype = next(iter(params.values())).dtype
        self.buckets: list[Bucket] = make_buckets(forward[::-1], shapes, self.unit_of, bucket_size, size, index,
                                                  set(alone), self.sharding.gather_weights)
        self.bucket_of = {n: b.index for b in self.buckets for n in b.names}
        self.last_microbatch = True  # set by the schedule before each backward pass
        self._pending = [set(b.names) for b in self.buckets]
        self._handles: dict[int, object] = {}
        self.decay = [self._mask(b) for b in self.buckets]

    # ---- helpers -----------------------------------------------------------------------------------------
    def _zeros(self, n: int):
        return zeros((n,), self.dtype, self.size_only)

    def _mask(self, b: Bucket):
        flags = {n: 1.0 if self.specs[n].decay else 0.0 for n in b.names}
        if self.size_only:
            return 1.0
        return b.flat_mask(flags, self.dtype)

    def _held_mask(self, b: Bucket):
        if self.size_only:
            return 1.0
        lo, hi = self.held_range(b)
        return self.decay[b.index][lo:hi]

    # ---- the chunk's interface ---------------------------------------------------------------------------
    def begin(self, unit: str, phase: str) -> None:
        pass

    def end(self, unit: str, phase: str) -> None:
        if phase != BACKWARD or not (self.sharding.reduce_each_microbatch or self.last_microbatch):
            return
        for name in self.units.get(unit, ()):
            b = self.bucket_of[name]
            self._pending[b].discard(name)
            if not self._pending[b]:
                self._pending[b] = set(self.buckets[b].names)
                self._bucket_final(self.buckets[b])

    # ---- reductions --------------------------------------------------------------------------------------
    def _bucket_final(self, b: Bucket) -> None:
        """A bucket's gradients are final for this round: reduce now (each microbatch, or overlapped with the
        rest of backward) or leave it for finish()."""
        if self.sharding.reduce_each_microbatch:
            if b.index in self._handles:  # the previous microbatch's reduction of this bucket
                self._take(b, self._handles.pop(b.index).wait())
            handle = self._reduce(b, async_op=self.overlap)
            self._after_launch(b)
            if self.overlap:
                self._handles[b.index] = handle
            else:
                self._take(b, handle.wait())
        elif self.overlap:
            self._handles[b.index] = self._reduce(b, async_op=True)

    def _reduce(self, b: Bucket, async_op: bool):
        return reduce_gradients(self.comm, self.group, self.size, self.local_grad(b), b.index, self.scatter, async_op)

    def _after_launch(self, b: Bucket) -> None:
        """After a bucket's per-microbatch reduction started (ZeRO-2/3 clear the whole-bucket gradients)."""

    def finish(self) -> None:
        """End of the step's backward: every bucket reduced, results in place."""
        for b in self.buckets:
            if b.index in self._handles:
                self._take(b, self._handles.pop(b.index).wait())
            elif not self.sharding.reduce_each_microbatch:
                self._take(b, self._reduce(b, async_op=False).wait())

    def local_grad(self, b: Bucket):
        """The bucket's gradients as this rank computed them (the flat buffer to reduce)."""
        raise NotImplementedError

    def _take(self, b: Bucket, reduced) -> None:
        raise NotImplementedError

    # ---- what the optimizer and the cross-group reductions see ---------------------------------------------
    def held_range(self, b: Bucket) -> tuple[int, int]:
        """[lo, hi) of the bucket's flat buffer whose reduced gradients this rank holds."""
        return b.shard if self.scatter else (0, b.padded)

    def held_grad(self, b: Bucket):
        raise NotImplementedError

    def held_param(self, b: Bucket):
        raise NotImplementedError

    def step(self) -> None:
        """One optimizer step on what this rank holds, then zero the gradients."""
        raise NotImplementedError

    def state_bytes(self) -> dict:
        """Bytes of parameters, gradients and optimizer state this rank keeps between steps."""
        raise NotImplementedError

    def _optimizer_bytes(self) -> int:
        per = 2 if self.optimizer.name == "adamw" else (1 if getattr(self.optimizer, "momentum", 0) else 0)
        return per * sum(hi - lo for lo, hi in map(self.held_range, self.buckets)) * self.dtype.itemsize

    def numel(self) -> int:
        return sum(b.numel for b in self.buckets)

    # ---- the parameters, whole, for checking -------------------------------------------------------------
    def local_params(self) -> dict | None:
        """name -> this rank's (TP-local) parameter, or None if the store keeps only shards (ZeRO-3)."""
        return None

    def shards(self) -> list[dict]:
        """Per bucket: names, shapes, offsets and this rank's parameter shard (for reassembly)."""
        return [{"names": b.names, "shapes": b.shapes, "offsets": b.offsets, "shard": b.shard,
                 "data": self.held_param(b)} for b in self.buckets]


def flat_size(shapes) -> int:
    return sum(math.prod(s) for s in shapes)


__all__ = ["BACKWARD", "FORWARD", "DataParallelStore"]
