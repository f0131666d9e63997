"""Serial training: the reference every parallel layout must reproduce (one process; the whole batch at once, or
its sums ordered as a layout orders them)."""
from __future__ import annotations

import numpy as np

from . import data
from .model.config import TransformerConfig
from .model.gpt import ChunkContext, GPTChunk, LocalStore, init_params, param_specs
from .model.moe.balance import updated_expert_bias
from .model.tensor import value


def forward_backward(config: TransformerConfig, params: dict, ids, targets, micro_batch_size: int | None = None,
                     replicas: int = 1, expert_bias: dict | None = None, routed: dict | None = None):
    """Loss (mean token cross-entropy) and gradients of every parameter, for ids and targets [s, b].

    By default the whole batch at once. Otherwise the sums run in the order data and pipeline parallelism run them:
    the batch is cut into `replicas` contiguous parts (the data-parallel ranks' rows); each part's gradients are
    accumulated in place over its microbatches of `micro_batch_size` sequences, in batch order (as a pipeline
    stage accumulates them), and the parts' gradients are then summed in order (as the all-reduce of two ranks
    sums them). The loss is accumulated the same way. MoE layers route with expert_bias (layer -> bias) and add
    the tokens each expert received to routed (layer -> counts)."""
    part = ids.shape[1] // replicas
    step = micro_batch_size or part
    loss, grads = 0.0, None
    for first in range(0, ids.shape[1], part):
        store = LocalStore(params)
        ctx = ChunkContext(config, store, np.arange(ids.shape[0]), tied=not config.untie_embeddings_and_output_weights,
                           expert_bias=expert_bias or {}, routed=routed if routed is not None else {})
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
    bias = expert_biases(config, dtype)
    losses = []
    for step in range(steps):
        ids, targets = data.batch(config, global_batch_size, step, data_seed)
        routed = {i: np.zeros_like(b) for i, b in bias.items()}
        loss, grads = forward_backward(config, params, ids, targets, micro_batch_size, replicas, bias, routed)
        for n, p in params.items():
            optimizer.step(p, grads[n], states[n], 1.0 if specs[n].decay else 0.0)
        for i in bias:
            bias[i] = updated_expert_bias(bias[i], routed[i], config.moe_router_bias_update_rate)
        losses.append(loss)
    return params, losses


def expert_biases(config: TransformerConfig, dtype) -> dict:
    """Every MoE layer's expert bias at the start (zeros), when the model balances without an auxiliary loss."""
    if not config.is_moe or not config.moe_router_enable_expert_bias:
        return {}
    return {i: np.zeros(config.num_moe_experts, dtype) for i, moe in enumerate(config.moe_layers) if moe}
