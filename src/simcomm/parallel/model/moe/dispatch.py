"""Token permutation: one row per (token, expert) pair, grouped by expert, and back (Megatron-Core's permute,
unpermute and sort_chunks_by_idxs, moe_utils.py).

The permuted layout is expert-major: expert 0's rows first, each expert's rows in token order, so the rows for
the experts of one expert-parallel rank (a contiguous run of experts) are contiguous too. `Permutation` says where
each row comes from and how many rows each expert has; expert parallelism sends `splits_by_rank` rows to each rank
with all_to_all, and the receiver regroups what arrived (source-rank-major) by local expert with
`sort_chunks_by_index` before its experts run (and back after them). Probabilities travel with their rows: the
experts weight their own outputs (Megatron applies them after the activation), so combining is a plain sum.

Permute and unpermute are each other's adjoint: each one's backward is the other.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tensor import Meta, concat, is_meta


@dataclass(frozen=True)
class Permutation:
    """tokens_per_expert [E]: rows per expert, in expert order. sorted_indices [rows]: the token each row copies
    (None for a size-only routing, which only has counts)."""

    num_tokens: int
    tokens_per_expert: np.ndarray
    sorted_indices: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        return int(self.tokens_per_expert.sum())

    @property
    def expert_of_row(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.tokens_per_expert)), self.tokens_per_expert)


def permutation(routing_map, tokens_per_expert=None) -> Permutation:
    """The layout of the rows for routing_map [T, E] (bool); size-only maps need tokens_per_expert."""
    if is_meta(routing_map):
        return Permutation(routing_map.shape[0], np.asarray(tokens_per_expert, np.int64))
    _, token = np.nonzero(routing_map.T)  # expert-major, tokens ascending within an expert
    return Permutation(routing_map.shape[0], routing_map.sum(axis=0).astype(np.int64), token)


def permute(tokens, perm: Permutation):
    """Rows [rows, h] from tokens [T, h]: each token copied once per expert it goes to."""
    if is_meta(tokens) or perm.sorted_indices is None:
        return Meta((perm.num_rows,) + tuple(tokens.shape[1:]), tokens.dtype)
    return tokens[perm.sorted_indices]


def unpermute(rows, perm: Permutation):
    """Tokens [T, h]: each token the sum of its rows (zero for a token no expert computed)."""
    if is_meta(rows) or perm.sorted_indices is None:
        return Meta((perm.num_tokens,) + tuple(rows.shape[1:]), rows.dtype)
    out = np.zeros((perm.num_tokens,) + rows.shape[1:], rows.dtype)
    np.add.at(out, perm.sorted_indices, rows)
    return out


def permute_probs(probs, perm: Permutation):
    """Each row's routing probability [rows] from probs [T, E]."""
    if is_meta(probs) or perm.sorted_indices is None:
        return Meta((perm.num_rows,), probs.dtype)
    return probs[perm.sorted_indices, perm.expert_of_row]


def unpermute_probs(row_values, perm: Permutation):
    """[T, E] holding each row's value at its (token, expert), zero elsewhere (permute_probs' adjoint)."""
    E = len(perm.tokens_per_expert)
    if is_meta(row_values) or perm.sorted_indices is None:
        return Meta((perm.num_tokens, E), row_values.dtype)
    out = np.zeros((perm.num_tokens, E), row_values.dtype)
    out[perm.sorted_indices, perm.expert_of_row] = row_values
    return out


# ---- regrouping the rows that expert parallelism exchanges --------------------------------------------------------
def splits_by_rank(tokens_per_expert, ep_size: int) -> np.ndarray:
    """Rows for each of ep_size ranks holding E / ep_size consecutive experts each (all_to_all's input splits)."""
    counts = np.asarray(tokens_per_expert, np.int64)
    return counts.reshape(ep_size, -1).sum(axis=1)


def sort_chunks_by_index(rows, split_sizes, order):
    """Rows cut into chunks of split_sizes, put back together in `order` (Megatron's sort_chunks_by_idxs)."""
    sizes = [int(n) for n in split_sizes]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return concat([rows[starts[i]:starts[i] + sizes[i]] for i in order], axis=0)


def chunk_orders(num_local_experts: int, ep_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(sort_input_by_local_experts, restore_output_by_local_experts): the orders that turn rows received as
    [source rank][local expert] chunks into [local expert][source rank] chunks, and back."""
    chunks = np.arange(ep_size * num_local_experts)
    return chunks.reshape(-1, num_local_experts).T.ravel(), chunks.reshape(num_local_experts, -1).T.ravel()
