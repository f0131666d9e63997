"""Synthetic training data: the same token batches for serial training and for every parallel layout.

Batch `step` is `global_batch_size` sequences of seq_length + 1 tokens from a generator seeded by (seed, step):
each sequence counts from a random start with a random stride of 1 to 3, modulo the vocabulary, so a model can
learn it (the loss falls from log V as it does). Inputs are tokens[:, :-1] and targets tokens[:, 1:], both
[sequence, batch] (Megatron's layout).
Each parallel rank takes its share of the same batch: its data-parallel rows, its microbatch, its
context-parallel positions.
"""
from __future__ import annotations

import numpy as np

from .model.config import TransformerConfig


def batch(config: TransformerConfig, global_batch_size: int, step: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(ids, targets), each [seq_length, global_batch_size] int64."""
    rng = np.random.default_rng([seed, step])
    start = rng.integers(0, config.padded_vocab_size, size=(global_batch_size, 1))
    stride = rng.integers(1, 4, size=(global_batch_size, 1))
    tokens = (start + stride * np.arange(config.seq_length + 1)) % config.padded_vocab_size
    return np.ascontiguousarray(tokens[:, :-1].T), np.ascontiguousarray(tokens[:, 1:].T)
