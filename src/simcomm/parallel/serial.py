"""Serial training: the reference every parallel layout must reproduce (one process, the whole batch at once)."""
from __future__ import annotations

from . import data
from .model.config import TransformerConfig
from .model.gpt import ChunkContext, GPTChunk, LocalStore, init_params, param_specs
from .model.tensor import value


def forward_backward(config: TransformerConfig, params: dict, ids, targets):
    """Loss (mean token cross-entropy) and gradients of every parameter, for ids and targets [s, b]."""
    import numpy as np
    store = LocalStore(params)
    ctx = ChunkContext(config, store, np.arange(ids.shape[0]), tied=not config.untie_embeddings_and_output_weights)
    chunk = GPTChunk(range(config.num_layers), True, True, ctx)
    loss = chunk.forward(0, ids=ids, targets=targets, loss_scale=1.0 / ids.size)
    chunk.backward(0)
    return value(loss), store.grads


def train_serial(config: TransformerConfig, optimizer, steps: int, global_batch_size: int, seed: int = 0,
                 data_seed: int = 0, dtype="float64", params: dict | None = None) -> tuple[dict, list[float]]:
    """Train `steps` optimizer steps on the synthetic batches; returns (final parameters, loss per step)."""
    params = {k: v.copy() for k, v in (params or init_params(config, seed, dtype)).items()}
    specs = param_specs(config)
    states = {n: optimizer.state(p) for n, p in params.items()}
    losses = []
    for step in range(steps):
        ids, targets = data.batch(config, global_batch_size, step, data_seed)
        loss, grads = forward_backward(config, params, ids, targets)
        for n, p in params.items():
            optimizer.step(p, grads[n], states[n], 1.0 if specs[n].decay else 0.0)
        losses.append(loss)
    return params, losses
