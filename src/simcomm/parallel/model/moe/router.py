"""The router of an MoE layer, as Megatron-Core's TopKRouter computes it, with a hand-written backward.

From the router logits [T, E] (T tokens, E experts):
1. scores and top-k (topk_routing_with_score_function): softmax, the top k logits then a softmax over those k (or
   with moe_router_pre_softmax a softmax over all E, then the top k of it); sigmoid, the top k of
   sigmoid(logits) + expert_bias (the bias chooses, it never weighs), normalised over the k chosen when k > 1.
   Group-limited routing first keeps moe_router_group_topk of moe_router_num_groups expert groups, ranked by the
   sum of each group's top k / group_topk scores. The probabilities are multiplied by
   moe_router_topk_scaling_factor.
2. token dropping (apply_router_token_dropping), with moe_expert_capacity_factor: each expert keeps at most
   capacity = ceil(T k / E * factor) tokens, those of highest probability ("probs") or the earliest ("position");
   kept probabilities are not renormalised. With moe_pad_expert_input_to_capacity every expert computes exactly
   capacity rows, the missing ones being tokens not routed to it (probability 0).
3. the load-balancing losses and the z-loss, on the logits of every token (they see neither the bias, nor the
   groups, nor the dropping: compute_routing_scores_for_aux_loss).

On size-only logits the routing is an input: `routed_tokens_per_expert` (balanced when not given).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..layers import sigmoid
from ..tensor import Meta, is_meta
from .balance import aux_losses, balanced_counts, loss_names
from ..errors import ModelConfigError
from .config import get_capacity

_EPS = 1e-20  # Megatron's guard in the sigmoid normalisation


@dataclass
class Routing:
    """Where the tokens go.

    probs [T, E]: each token's kept top-k probabilities (scaled), zero elsewhere. routing_map [T, E] (bool): the
    (token, expert) rows the experts compute. tokens_per_expert [E]: rows per expert (routing_map's column sums;
    what the expert bias counts and what expert parallelism exchanges). losses: each auxiliary loss's value (the
    coefficient included; None when size-only), keyed by Megatron's logged names. capacity: rows an expert may
    take (None when dropless).
    """

    probs: object
    routing_map: object
    tokens_per_expert: np.ndarray
    losses: dict[str, float | None]
    capacity: int | None = None
    cache: tuple | None = field(default=None, repr=False)


def route(logits, moe, seq_length: int, expert_bias=None, routed_tokens_per_expert=None,
          reduce_counts=None) -> Routing:
    """Route T = seq_length * batch tokens (logits [T, E], rows in [s, b] order).

    reduce_counts: sums per-expert counts over the ranks sharing the micro-batch's sequence (TP x CP), as the
    losses need (identity by default). routed_tokens_per_expert: the routing of size-only logits, before dropping.
    """
    T, E = logits.shape
    k = moe.moe_router_topk
    if expert_bias is not None and not moe.moe_router_enable_expert_bias:
        raise ValueError("an expert_bias was given but moe_router_enable_expert_bias is off")
    if is_meta(logits):
        counts = balanced_counts(T, k, E) if routed_tokens_per_expert is None else routed_tokens_per_expert
        counts, capacity = expert_rows(counts, T, moe)
        return Routing(Meta((T, E), logits.dtype), Meta((T, E), np.bool_), counts,
                       {name: None for name in loss_names(moe)}, capacity)
    top, probs_k, select_cache = _top_k(logits, moe, expert_bias)
    scale = moe.moe_router_topk_scaling_factor or 1.0
    rows = np.arange(T)[:, None]
    probs = np.zeros_like(logits)
    probs[rows, top] = probs_k * scale
    routing_map = np.zeros((T, E), bool)
    routing_map[rows, top] = True
    capacity = None
    if moe.moe_expert_capacity_factor is not None:
        probs, routing_map, capacity = _drop(probs, routing_map, moe)
    losses, dlogits_losses = aux_losses(logits, moe, seq_length, reduce_counts)
    return Routing(probs, routing_map, routing_map.sum(axis=0).astype(np.int64), losses, capacity,
                   (top, select_cache, scale, dlogits_losses))


def route_backward(dprobs, routing: Routing, aux_loss_grad: float = 1.0):
    """dlogits [T, E] from the gradient of the routing probabilities dprobs [T, E], plus aux_loss_grad times the
    auxiliary losses' gradient (aux_loss_grad: how much one unit of aux loss weighs in the objective; Megatron's
    MoEAuxLossAutoScaler uses the main loss's scale, 1 / micro-batches)."""
    if routing.cache is None:
        return Meta(routing.probs.shape, routing.probs.dtype)
    top, select_cache, scale, dlogits_losses = routing.cache
    dprobs = dprobs * routing.routing_map  # dropped (token, expert) pairs received no probability
    dprobs_k = np.take_along_axis(dprobs, top, axis=1) * scale
    dlogits = _top_k_backward(dprobs_k, top, select_cache, dprobs.shape)
    return dlogits + aux_loss_grad * dlogits_losses


# ---- 1. scores and top-k ---------------------------------------------------------------------------------------
def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_backward(dy, y):
    return y * (dy - (dy * y).sum(axis=-1, keepdims=True))


def top_k_experts(scores, moe) -> np.ndarray:
    """[T, k] indices of each token's chosen experts (group-limited when moe_router_group_topk is set); ties go
    to the lower index."""
    k, groups, group_topk = moe.moe_router_topk, moe.moe_router_num_groups, moe.moe_router_group_topk
    if group_topk:
        T, E = scores.shape
        grouped = scores.reshape(T, groups, E // groups)
        best = -np.sort(-grouped, axis=-1)[..., :k // group_topk].sum(axis=-1)  # [T, groups]
        chosen = np.argsort(-best, axis=-1, kind="stable")[:, :group_topk]
        allowed = np.zeros((T, groups), bool)
        np.put_along_axis(allowed, chosen, True, axis=-1)
        scores = np.where(np.repeat(allowed, E // groups, axis=-1), scores, -np.inf)
    return np.argsort(-scores, axis=-1, kind="stable")[:, :k]


def _top_k(logits, moe, expert_bias):
    """(top [T, k], the chosen experts' probabilities [T, k] before scaling, what backward needs)."""
    k = moe.moe_router_topk
    if moe.moe_router_score_function == "softmax":
        if moe.moe_router_pre_softmax:
            scores = softmax(logits)
            top = top_k_experts(scores, moe)
            return top, np.take_along_axis(scores, top, axis=1), ("pre_softmax", scores)
        top = top_k_experts(logits, moe)
        p = softmax(np.take_along_axis(logits, top, axis=1))
        return top, p, ("softmax", p)
    scores = sigmoid(logits)
    top = top_k_experts(scores if expert_bias is None else scores + expert_bias, moe)
    chosen = np.take_along_axis(scores, top, axis=1)
    total = chosen.sum(axis=1, keepdims=True) + _EPS if k > 1 else None
    return top, chosen if total is None else chosen / total, ("sigmoid", scores, chosen, total)


def _top_k_backward(dp, top, cache, shape):
    kind = cache[0]
    dlogits = np.zeros(shape, dp.dtype)
    rows = np.arange(shape[0])[:, None]
    if kind == "softmax":
        dlogits[rows, top] = _softmax_backward(dp, cache[1])
        return dlogits
    if kind == "pre_softmax":
        dlogits[rows, top] = dp
        return _softmax_backward(dlogits, cache[1])
    _, scores, chosen, total = cache
    if total is not None:  # through the normalisation p = chosen / total
        dp = dp / total - (dp * chosen).sum(axis=1, keepdims=True) / total ** 2
    dlogits[rows, top] = dp
    return dlogits * scores * (1.0 - scores)


# ---- 2. capacity -----------------------------------------------------------------------------------------------
def _drop(probs, routing_map, moe):
    """Megatron's apply_router_token_dropping: (probs, routing_map, capacity) after capacity."""
    T, E = probs.shape
    capacity = get_capacity(T * moe.moe_router_topk, E, moe.moe_expert_capacity_factor)
    if capacity >= T:
        keep = np.ones((T, E), bool)
    else:
        # the highest probabilities, or the routed tokens in position order; stable: ties go to earlier tokens
        key = probs if moe.moe_token_drop_policy == "probs" else routing_map.astype(np.int8)
        kept = np.argsort(-key, axis=0, kind="stable")[:capacity]
        keep = np.zeros((T, E), bool)
        np.put_along_axis(keep, kept, True, axis=0)
    final = keep if moe.moe_pad_expert_input_to_capacity else routing_map & keep
    return probs * final, final, capacity


def expert_rows(routed_tokens_per_expert, num_tokens: int, moe) -> tuple[np.ndarray, int | None]:
    """(rows each expert computes, capacity) for a routing given as per-expert counts before dropping: the
    counts (dropless), capped at the capacity, or every expert's capacity (padding; at most the T tokens)."""
    counts = np.asarray(routed_tokens_per_expert, np.int64)
    if counts.shape != (moe.num_moe_experts,) or (counts < 0).any():
        raise ModelConfigError(f"routed_tokens_per_expert must hold {moe.num_moe_experts} counts >= 0, got {counts}")
    if moe.moe_expert_capacity_factor is None:
        return counts, None
    E = len(counts)
    capacity = get_capacity(num_tokens * moe.moe_router_topk, E, moe.moe_expert_capacity_factor)
    if moe.moe_pad_expert_input_to_capacity:
        return np.full(E, min(capacity, num_tokens), np.int64), capacity
    return np.minimum(counts, capacity), capacity
