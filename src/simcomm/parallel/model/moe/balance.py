"""Load balance: the auxiliary losses on the router (Switch/GShard load-balancing loss per micro-batch or per
sequence, ST-MoE's z-loss) and DeepSeek-V3's aux-loss-free expert bias, as Megatron-Core computes them.

The losses see every token's top-k of the plain scores (softmax over all experts, or sigmoid normalised over all
experts), without the expert bias, the group limit or token dropping (compute_routing_scores_for_aux_loss). For
fixed counts the load-balancing loss is linear in the scores, so its gradient is known at forward time.
"""
from __future__ import annotations

import numpy as np

from ..layers import sigmoid
from .config import LOSS_NAMES, Z_LOSS, aux_loss_coeffs

_EPS = 1e-20


def loss_names(moe) -> list[str]:
    """The losses an MoE layer adds (Megatron's logged names), in the order `aux_losses` returns them."""
    names = [LOSS_NAMES[t] for t, a in aux_loss_coeffs(moe).items() if a > 0]
    return names + ([Z_LOSS] if moe.moe_z_loss_coeff is not None else [])


def aux_losses(logits, moe, seq_length: int, reduce_counts=None):
    """({loss name: value}, d(sum of the losses)/dlogits) for router logits [T, E] (rows in [s, b] order).

    reduce_counts sums per-expert counts over the ranks that share the micro-batch's sequence (TP x CP); the
    token totals follow from the summed counts (each token is counted k times)."""
    losses, dlogits = {}, np.zeros_like(logits)
    active = {t: a for t, a in aux_loss_coeffs(moe).items() if a > 0}
    if active:
        scores, cache = _aux_scores(logits, moe.moe_router_score_function)
        k = moe.moe_router_topk
        routed = np.zeros(scores.shape, bool)
        np.put_along_axis(routed, np.argsort(-scores, axis=1, kind="stable")[:, :k], True, axis=1)
        dscores = np.zeros_like(scores)
        for kind, coeff in active.items():
            per = _per_sequence if kind == "seq_aux_loss" else _per_micro_batch
            value, d = per(scores, routed, k, coeff, seq_length, reduce_counts or (lambda c: c))
            losses[LOSS_NAMES[kind]] = value
            dscores += d
        dlogits += _aux_scores_backward(dscores, cache)
    if moe.moe_z_loss_coeff is not None:
        value, d = z_loss(logits, moe.moe_z_loss_coeff)
        losses[Z_LOSS] = value
        dlogits += d
    return losses, dlogits


def switch_load_balancing_loss(scores, tokens_per_expert, total_num_tokens, topk: int, num_experts: int,
                               coeff: float):
    """Megatron's switch_load_balancing_loss_func: coeff E / (k T^2) sum_e (sum_t scores[t, e]) n_e, n_e the
    tokens routed to expert e and T the tokens. 1 x coeff when the routing is balanced. Returns (loss,
    dloss/dscores)."""
    w = coeff * num_experts / (topk * total_num_tokens ** 2) * np.asarray(tokens_per_expert, scores.dtype)
    return float(scores.sum(axis=0) @ w), np.broadcast_to(w, scores.shape)


def _per_micro_batch(scores, routed, k, coeff, seq_length, reduce_counts):
    counts = reduce_counts(routed.sum(axis=0).astype(scores.dtype))
    return switch_load_balancing_loss(scores, counts, counts.sum() / k, k, scores.shape[1], coeff)


def _per_sequence(scores, routed, k, coeff, seq_length, reduce_counts):
    """DeepSeek's sequence-wise loss: each sequence (column b of [s, b]) balanced on its own, averaged over b."""
    T, E = scores.shape
    b = T // seq_length
    counts = reduce_counts(routed.reshape(seq_length, b * E).sum(axis=0).astype(scores.dtype))
    value, d = switch_load_balancing_loss(scores.reshape(seq_length, b * E), counts, counts.sum() / (k * b), k, E,
                                          coeff)
    return value / b, d.reshape(T, E) / b


def _aux_scores(logits, score_function: str):
    if score_function == "softmax":
        e = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = e / e.sum(axis=-1, keepdims=True)
        return scores, ("softmax", scores)
    u = sigmoid(logits)
    total = u.sum(axis=-1, keepdims=True) + _EPS
    return u / total, ("sigmoid", u, total)


def _aux_scores_backward(dscores, cache):
    if cache[0] == "softmax":
        y = cache[1]
        return y * (dscores - (dscores * y).sum(axis=-1, keepdims=True))
    _, u, total = cache
    du = dscores / total - (dscores * u).sum(axis=-1, keepdims=True) / total ** 2
    return du * u * (1.0 - u)


def z_loss(logits, coeff: float):
    """ST-MoE's router z-loss, coeff x mean over tokens of logsumexp(logits)^2 (Megatron's z_loss_func); returns
    (loss, dloss/dlogits)."""
    m = logits.max(axis=-1, keepdims=True)
    e = np.exp(logits - m)
    total = e.sum(axis=-1, keepdims=True)
    lse = m + np.log(total)
    T = logits.shape[0]
    return float(coeff * (lse * lse).mean()), coeff * 2.0 * lse / T * (e / total)


# ---- aux-loss-free balancing (DeepSeek-V3) ----------------------------------------------------------------------
def updated_expert_bias(expert_bias, tokens_per_expert, update_rate: float):
    """Megatron's get_updated_expert_bias, run once per step after the backward: bias + rate * sign(mean - n_e),
    n_e the tokens each expert computed over the step's micro-batches, summed over TP x CP x DP."""
    counts = np.asarray(tokens_per_expert, np.float64)
    bias = np.asarray(expert_bias)
    return (bias + np.sign(counts.mean() - counts) * update_rate).astype(bias.dtype)


def balanced_counts(num_tokens: int, topk: int, num_experts: int) -> np.ndarray:
    """T k rows spread as evenly as they go: every expert T k // E, the first (T k) % E one more."""
    base, extra = divmod(num_tokens * topk, num_experts)
    return np.array([base + (e < extra) for e in range(num_experts)], np.int64)


# ---- routing as an input (the step model, size-only runs) -----------------------------------------------------
def routing_shares(num_experts: int, skew: float = 0.0, load=None) -> np.ndarray:
    """Each expert's share of the routed rows: a measured relative load (normalised), else Zipf's law with exponent
    `skew` over the experts in index order (expert i gets (i + 1)^-skew; 0: perfectly balanced). The hottest experts
    have the lowest indices, so they share the first expert-parallel rank: the worst placement of a skewed load."""
    if load is not None:
        w = np.asarray(load, np.float64)
        if w.shape != (num_experts,):
            raise ValueError(f"an expert load must give {num_experts} values, got {len(w)}")
    else:
        w = np.arange(1, num_experts + 1, dtype=np.float64) ** -float(skew)
    return w / w.sum()


def routed_counts(num_tokens: int, topk: int, shares) -> np.ndarray:
    """num_tokens x topk rows over the experts in proportion to `shares` (largest remainders), no expert more than
    num_tokens (a token picks an expert once): what an expert over its cap cannot take goes to the others in
    proportion. Balanced shares give balanced_counts."""
    shares = np.asarray(shares, np.float64)
    E, total = len(shares), num_tokens * topk
    counts = np.zeros(E, np.int64)
    capped = np.zeros(E, bool)
    left = total
    while left > 0:
        w = np.where(capped, 0.0, shares)
        if w.sum() <= 0:  # every expert with a share is full: the rest spread over those with room
            w = (~capped).astype(np.float64)
        ideal = left * w / w.sum()
        add = np.floor(ideal).astype(np.int64)
        rest = left - int(add.sum())
        order = np.lexsort((np.arange(E), -(ideal - add)))  # largest remainders, ties to the lower index
        add[order[:rest]] += 1
        counts += add
        over = np.maximum(counts - num_tokens, 0)
        counts -= over
        capped |= counts >= num_tokens
        left = int(over.sum())
    return counts
