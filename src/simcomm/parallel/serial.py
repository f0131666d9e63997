"""Serial training: the reference every parallel layout must reproduce (one process; the whole batch at once, or
its sums ordered as a layout orders them)."""
from __future__ import annotations

import numpy as np

from . import data
from .model.config import TransformerConfig
from .model.gpt import ChunkContext, GPTChunk, LocalStore, init_params, param_specs
from .model.tensor import value


def forward_backward(config: TransformerConfig, params: dict, ids, targets, micro_batch_size: int | None = None,
                     replicas: int = 1):
    """Loss (mean token cross-entropy) and gradients of every parameter, for ids and targets [s, b].

    By default the whole batch at once. Otherwise the sums run in the order data and pipeline parallelism run them:
    the batch is cut into `replicas` contiguous parts (the data-parallel ranks' rows); each part's gradients are
    accumulated in place over its microbatches of `micro_batch_size` sequences, in batch order (as a pipeline
    stage accumulates them), and the parts' gradients are then summed in order (as the all-reduce of two ranks
    sums them). The loss is accumulated the same way."""
    part = ids.shape[1] // replicas
    step = micro_batch_size or part
    loss, grads = 0.0, None
    for first in range(0, ids.shape[1], part):
        store = LocalStore(params)
        ctx = ChunkContext(config, store, np.arange(ids.shape[0]),
                           tied=not config.untie_embeddings_and_output_weights)
        chunk = GPTChunk(range(config.num_layers), True, True, ctx)
        share = 0.0
        for lo in range(first, first + part, step):
            rows = slice(lo, lo + step)
            out = chunk.forward(lo, ids=np.ascontiguousarray(ids[:, rows]),
                                targets=np.ascontiguousarray(targets[:, rows]), loss_scale=1.0 / ids.size)
            chunk.backward(lo)
            share += value(out)
        loss += share
        grads = store.grads if grads is None else {n: g + store.grads[n] for n, g in grads.items()}
    return loss, grads


def train_serial(config: TransformerConfig, optimizer, steps: int, global_batch_size: int, seed: int = 0,
                 data_seed: int = 0, dtype="float64", params: dict | None = None,
                 micro_batch_size: int | None = None, replicas: int = 1) -> tuple[dict, list[float]]:
    """Train `steps` optimizer steps on the synthetic batches; returns (final parameters, loss per step).

    micro_batch_size and replicas order the sums as a layout does (forward_backward): the reference a layout
    equals bitwise where it adds the same terms in the same order (tests/parallel/test_numeric_training.py)."""
    params = {k: v.copy() for k, v in (params or init_params(config, seed, dtype)).items()}
    specs = param_specs(config)
    states = {n: optimizer.state(p) for n, p in params.items()}
    losses = []
    for step in range(steps):
        ids, targets = data.batch(config, global_batch_size, step, data_seed)
        loss, grads = forward_backward(config, params, ids, targets, micro_batch_size, replicas)
        for n, p in params.items():
            optimizer.step(p, grads[n], states[n], 1.0 if specs[n].decay else 0.0)
        losses.append(loss)
    return params, losses
