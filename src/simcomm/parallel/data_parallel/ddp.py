"""Data parallelism as PyTorch DDP and Megatron's DistributedDataParallel do it: every rank keeps the whole model
and its optimizer state; gradients live in flat bucket buffers that are all-reduced (summed: the loss is already
normalised by the global batch), optionally as soon as each bucket is final during backward."""
from __future__ import annotations

from .store import DataParallelStore


class DDPStore(DataParallelStore):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        params = args[5] if len(args) > 5 else kwargs["params"]
        self.param_flat = [self._zeros(b.padded) for b in self.buckets]
        self.grad_flat = [self._zeros(b.padded) for b in self.buckets]
        self._params, self._grads = {}, {}
        for b in self.buckets:
            self._params.update(b.views(self.param_flat[b.index]))
            self._grads.update(b.views(self.grad_flat[b.index]))
            for n in b.names:
                self._params[n][...] = params[n]
        self.states = [self.optimizer.state(self.held_param(b)) for b in self.buckets]

    def param(self, name):
        return self._params[name]

    def grad(self, name):
        return self._grads[name]

    def local_grad(self, b):
        return self.grad_flat[b.index]

    def _take(self, b, reduced) -> None:
        self.grad_flat[b.index][...] = reduced

    def held_grad(self, b):
        return self.grad_flat[b.index]

    def held_param(self, b):
        return self.param_flat[b.index]

    def step(self) -> None:
        for b in self.buckets:
            self.optimizer.step(self.param_flat[b.index], self.grad_flat[b.index], self.states[b.index],
                                self._held_mask(b))
            self.grad_flat[b.index][...] = 0

    def local_params(self) -> dict:
        return {n: self._params[n].copy() for n in self._params}

    def state_bytes(self) -> dict:
        n = sum(b.padded for b in self.buckets) * self.dtype.itemsize
        return {"params": n, "grads": n, "optimizer": self._optimizer_bytes()}
