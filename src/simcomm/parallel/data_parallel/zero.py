"""ZeRO (Rajbhandari et al.): the optimizer state, then the gradients, then the parameters sharded over the
data-parallel ranks; rank i owns the i-th contiguous shard of every bucket.

- Stage 1 (Megatron's distributed optimizer): whole parameters and gradients on every rank; at the end of the
  step each bucket is reduce-scattered, each rank steps its shard, and the updated parameters are all-gathered.
- Stage 2: as stage 1, but gradients are reduce-scattered every microbatch and only the shard is kept.
- Stage 3 (FSDP, reshard_after_forward): only parameter shards are kept; a unit's parameters are all-gathered
  before its forward, freed after it, gathered again before its backward, and its gradients reduce-scattered
  after it. The embedding and head units are gathered once and kept through backward (FSDP's root unit).
"""
from __future__ import annotations

from ..model.gpt import BACKWARD, FORWARD
from ..model.tensor import Meta, is_meta
from .reduce import gather_parameters
from .sharding import sharding
from .store import DataParallelStore

ROOT_UNITS = ("embedding", "head")


class ZeroStore(DataParallelStore):
    def __init__(self, stage: int, *args, **kwargs):
        self.sharding = sharding(stage)
        super().__init__(*args, **kwargs)
        params = args[5] if len(args) > 5 else kwargs["params"]
        self.grad_shard = [self._zeros(b.shard_size) for b in self.buckets]
        whole = [self._zeros(b.padded) for b in self.buckets]
        for b in self.buckets:
            for n, v in b.views(whole[b.index]).items():
                v[...] = params[n]
        if self.sharding.weights:
            lo_hi = [b.shard for b in self.buckets]
            self.param_shard = [whole[b.index][lo:hi].copy() for b, (lo, hi) in zip(self.buckets, lo_hi)]
            self.param_flat = [None] * len(self.buckets)
        else:
            self.param_flat = whole
        self.grad_flat = [None if self.sharding.gradients else self._zeros(b.padded) for b in self.buckets]
        self._params, self._grads = {}, {}
        for b in self.buckets:
            if self.param_flat[b.index] is not None:
                self._params.update(b.views(self.param_flat[b.index]))
            if self.grad_flat[b.index] is not None:
                self._grads.update(b.views(self.grad_flat[b.index]))
        self.states = [self.optimizer.state(self.held_param(b)) for b in self.buckets]
        self._unit_buckets = {u: sorted({self.bucket_of[n] for n in names}) for u, names in self.units.items()}

    # ---- parameters and gradients of a unit --------------------------------------------------------------
    def param(self, name):
        return self._params[name]

    def grad(self, name):
        b = self.buckets[self.bucket_of[name]]
        if self.grad_flat[b.index] is None:  # stages 2 and 3: whole-bucket gradients exist only during backward
            self.grad_flat[b.index] = self._zeros(b.padded)
            self._grads.update(b.views(self.grad_flat[b.index]))
        return self._grads[name]

    def begin(self, unit: str, phase: str) -> None:
        if self.sharding.weights:
            for i in self._unit_buckets.get(unit, ()):
                if self.param_flat[i] is None:
                    b = self.buckets[i]
                    self.param_flat[i] = gather_parameters(self.comm, self.group, self.size, self.param_shard[i], i)
                    self._params.update(b.views(self.param_flat[i]))

    def end(self, unit: str, phase: str) -> None:
        super().end(unit, phase)
        if self.sharding.weights and unit not in ROOT_UNITS:
            for i in self._unit_buckets.get(unit, ()):
                self._free(i)  # gathered again before its backward / the next forward

    # ---- reductions --------------------------------------------------------------------------------------
    def local_grad(self, b):
        g = self.grad_flat[b.index]
        if g is None:  # this microbatch produced no gradient here (cannot happen for a chunk's own buckets)
            g = self.grad_flat[b.index] = self._zeros(b.padded)
        return g

    def _after_launch(self, b) -> None:
        self.grad_flat[b.index] = None  # the reduction took a copy; the whole-bucket gradients are freed
        for n in b.names:
            self._grads.pop(n, None)

    def _take(self, b, reduced) -> None:
        if self.sharding.gradients:
            if not is_meta(reduced):
                self.grad_shard[b.index] += reduced
        else:
            self.grad_shard[b.index] = reduced

    def finish(self) -> None:
        super().finish()
        if self.sharding.weights:  # the root units' parameters were kept through backward: free them now
            for u in ROOT_UNITS:
                for i in self._unit_buckets.get(u, ()):
                    self._free(i)

    def _free(self, i: int) -> None:
        self.param_flat[i] = None
        for n in self.buckets[i].names:
            self._params.pop(n, None)

    # ---- the step ----------------------------------------------------------------------------------------
    def held_grad(self, b):
        return self.grad_shard[b.index]

    def held_param(self, b):
        if self.sharding.weights:
            return self.param_shard[b.index]
        lo, hi = b.shard
        return self.param_flat[b.index][lo:hi]

    def step(self) -> None:
        for b in self.buckets:
            self.optimizer.step(self.held_param(b), self.grad_shard[b.index], self.states[b.index],
                                self._held_mask(b))
            self.grad_shard[b.index] = self._zeros(b.shard_size)
            if not self.sharding.gradients:
                self.grad_flat[b.index][...] = 0
        if not self.sharding.weights:
            with self.comm.tagged(phase="optimizer"):
                for b in self.buckets:
                    lo, hi = b.shard
                    whole = gather_parameters(self.comm, self.group, self.size, self.param_flat[b.index][lo:hi],
                                              b.index)
                    self.param_flat[b.index][...] = whole

    def local_params(self) -> dict | None:
        if self.sharding.weights:
            return None
        return {n: self._params[n].copy() for n in self._params}

    def state_bytes(self) -> dict:
        item = self.dtype.itemsize
        whole = sum(b.padded for b in self.buckets) * item
        shard = sum(b.shard_size for b in self.buckets) * item
        return {"params": shard if self.sharding.weights else whole,
                "grads": shard if self.sharding.gradients else whole, "optimizer": self._optimizer_bytes()}


__all__ = ["BACKWARD", "FORWARD", "Meta", "ZeroStore"]
