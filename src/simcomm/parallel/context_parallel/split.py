"""The causal load-balanced split of a sequence over context-parallel ranks (Megatron's CP, Llama 3 §3.3.2).

The sequence is cut into 2c chunks; CP rank i holds chunks i and 2c - 1 - i, so every rank has one early and one
late chunk and does the same share of causal attention work (rank 0 of a plain split would attend to almost
nothing, rank c - 1 to almost everything).
"""
from __future__ import annotations

import numpy as np

from ..dims import LayoutError


def load_balanced_positions(seq_length: int, cp: int, rank: int) -> np.ndarray:
    """The global positions CP rank `rank` holds, in its local order (chunk i, then chunk 2c - 1 - i)."""
    if cp > 1 and seq_length % (2 * cp):
        raise LayoutError(f"context parallelism over {cp} ranks cuts the sequence into {2 * cp} chunks; "
                          f"seq_length {seq_length} is not divisible by {2 * cp}")
    if cp == 1:
        return np.arange(seq_length)
    chunk = seq_length // (2 * cp)
    first, second = rank, 2 * cp - 1 - rank
    return np.concatenate([np.arange(first * chunk, (first + 1) * chunk),
                           np.arange(second * chunk, (second + 1) * chunk)])


def causal_work(seq_length: int, cp: int, rank: int) -> int:
    """Query-key pairs rank `rank` attends to under the causal mask (equal on every rank with this split)."""
    pos = load_balanced_positions(seq_length, cp, rank)
    return int((pos + 1).sum())
