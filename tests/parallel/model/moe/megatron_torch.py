"""Megatron-Core's MoE layer rewritten with torch ops, the reference autograd differentiates: TopKRouter's
routing (topk_routing_with_score_function, group_limited_topk, apply_router_token_dropping), the losses
(compute_routing_scores_for_aux_loss, switch_load_balancing_loss_func, z_loss_func) added to the objective, and
the experts evaluated densely on every token (an expert's output weighted by the token's gate, zero if not routed),
so nothing of simcomm's permutation is reused."""
import torch
import torch.nn.functional as F

from simcomm.parallel.model.moe.layer import FC1, FC2, ROUTER, SHARED_FC1, SHARED_FC2, SHARED_GATE


def group_limited_topk(scores, topk, num_groups, group_topk):
    T, E = scores.shape
    group_scores = scores.view(T, num_groups, -1).topk(topk // group_topk, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=group_topk, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(T, num_groups, E // num_groups).reshape(T, -1)
    return torch.topk(scores.masked_fill(~score_mask.bool(), float("-inf")), k=topk, dim=-1)


def topk_routing(logits, moe, expert_bias=None):
    k = moe.moe_router_topk

    def topk(scores):
        if moe.moe_router_group_topk:
            return group_limited_topk(scores, k, moe.moe_router_num_groups, moe.moe_router_group_topk)
        return torch.topk(scores, k=k, dim=1)

    if moe.moe_router_score_function == "softmax":
        if moe.moe_router_pre_softmax:
            probs, top = topk(torch.softmax(logits, dim=-1))
        else:
            scores, top = topk(logits)
            probs = torch.softmax(scores, dim=-1)
    else:
        scores = torch.sigmoid(logits)
        if expert_bias is not None:
            _, top = topk(scores + torch.as_tensor(expert_bias))
            scores = torch.gather(scores, 1, top)
        else:
            scores, top = topk(scores)
        probs = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20) if k > 1 else scores
    if moe.moe_router_topk_scaling_factor:
        probs = probs * moe.moe_router_topk_scaling_factor
    return torch.zeros_like(logits).scatter(1, top, probs), torch.zeros_like(logits).int().scatter(1, top, 1).bool()


def token_dropping(probs, routing_map, moe):
    import math
    T, E = probs.shape
    capacity = math.ceil(T * moe.moe_router_topk / E * moe.moe_expert_capacity_factor)
    if capacity > T:
        keep = torch.ones_like(probs).bool()
    else:
        if moe.moe_token_drop_policy == "probs":
            idx = torch.topk(probs, k=capacity, dim=0, sorted=False)[1]
        else:  # the earliest routed tokens (Megatron's topk over the 0/1 map; its tie order made explicit)
            idx = torch.argsort(routing_map.int(), dim=0, descending=True, stable=True)[:capacity]
        keep = torch.zeros_like(probs).scatter(0, idx, 1).bool()
    final = keep if moe.moe_pad_expert_input_to_capacity else routing_map & keep
    return probs * final, final


def aux_losses(logits, moe, seq_length):
    k, E = moe.moe_router_topk, moe.num_moe_experts
    if moe.moe_router_score_function == "softmax":
        scores = torch.softmax(logits, dim=-1)
    else:
        scores = torch.sigmoid(logits)
        scores = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20)
    routing_map = torch.zeros_like(logits).int().scatter(1, torch.topk(scores, k=k, dim=1)[1], 1).bool()

    def switch(probs, tokens_per_expert, total, coeff):
        return torch.sum(probs.sum(dim=0) * tokens_per_expert) * (E * coeff / (k * total * total))

    types, coeffs = moe.moe_router_load_balancing_type, moe.moe_aux_loss_coeff
    pairs = [(types, coeffs)] if isinstance(types, str) else list(zip(types, coeffs))
    losses = {}
    for kind, coeff in pairs:
        if coeff <= 0 or kind == "none":
            continue
        if kind == "aux_loss":
            losses["load_balancing_loss"] = switch(scores, routing_map.sum(dim=0), logits.shape[0], coeff)
        else:
            b = logits.shape[0] // seq_length
            losses["seq_load_balancing_loss"] = switch(scores.reshape(seq_length, -1),
                                                       routing_map.reshape(seq_length, -1).sum(dim=0),
                                                       seq_length, coeff) / b
    if moe.moe_z_loss_coeff is not None:
        losses["z_loss"] = torch.mean(torch.square(torch.logsumexp(logits, dim=-1))) * moe.moe_z_loss_coeff
    return losses


def mlp(x, w1, w2, swiglu, weight=None):
    h = x @ w1
    if swiglu:
        a, b = torch.chunk(h, 2, dim=-1)
        h = F.silu(a) * b
    else:
        h = F.gelu(h, approximate="tanh")
    return (h if weight is None else h * weight) @ w2


def moe_layer(x, P, moe, expert_bias=None):
    """(y [s, b, h], {loss name: value}, routing_map [T, E] after dropping)."""
    s, b, h = x.shape
    xt = x.reshape(-1, h)
    logits = xt @ P[ROUTER]
    probs, routing_map = topk_routing(logits, moe, expert_bias)
    if moe.moe_expert_capacity_factor is not None:
        probs, routing_map = token_dropping(probs, routing_map, moe)
    y = sum(mlp(xt, P[FC1][e], P[FC2][e], moe.swiglu, probs[:, e:e + 1]) for e in range(moe.num_moe_experts))
    if moe.moe_shared_expert_intermediate_size is not None:
        shared = mlp(xt, P[SHARED_FC1], P[SHARED_FC2], moe.swiglu)
        if moe.moe_shared_expert_gate:
            shared = shared * torch.sigmoid(xt @ P[SHARED_GATE])
        y = y + shared
    return y.reshape(s, b, h), aux_losses(logits, moe, s), routing_map
