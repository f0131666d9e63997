"""The MoE layer (Megatron-Core's MoELayer in place of a dense MLP), forward and backward, one rank, no expert
parallelism: router, permutation, the experts on their rows, unpermutation, plus the shared expert.

Parameters are named as in Megatron-Core under a layer's `mlp.` (weights stored (in, out), as every simcomm
linear): router.weight [h, E]; experts.linear_fc1.weight [E, h, 2f or f] and experts.linear_fc2.weight [E, f, h]
(Megatron's grouped weight0..weight{E-1}, stacked); shared_experts.linear_fc1.weight, .linear_fc2.weight and
.gate_weight [h, 1]. No linear biases (add_bias_linear off, as in every MoE model here). The expert bias of
aux-loss-free balancing is state, not a parameter: the caller keeps it and updates it after each step
(`updated_expert_bias` with the step's summed `tokens_per_expert`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..layers import Flops, linear, linear_backward
from .dispatch import Permutation, permutation, permute, permute_probs, unpermute, unpermute_probs
from .experts import experts_backward, experts_forward, shared_expert_backward, shared_expert_forward
from .router import Routing, route, route_backward

ROUTER = "router.weight"
FC1, FC2 = "experts.linear_fc1.weight", "experts.linear_fc2.weight"
SHARED_FC1, SHARED_FC2 = "shared_experts.linear_fc1.weight", "shared_experts.linear_fc2.weight"
SHARED_GATE = "shared_experts.gate_weight"


def moe_param_shapes(hidden_size: int, moe) -> dict[str, tuple[int, ...]]:
    """Every parameter of one MoE layer, by name under the layer's `mlp.`."""
    h, E, f = hidden_size, moe.num_moe_experts, moe.moe_ffn_hidden_size
    up = 2 if moe.swiglu else 1
    shapes = {ROUTER: (h, E), FC1: (E, h, up * f), FC2: (E, f, h)}
    fs = moe.moe_shared_expert_intermediate_size
    if fs is not None:
        shapes.update({SHARED_FC1: (h, up * fs), SHARED_FC2: (fs, h)})
        if moe.moe_shared_expert_gate:
            shapes[SHARED_GATE] = (h, 1)
    return shapes


def init_moe_params(hidden_size: int, moe, seed: int = 0, dtype="float64", std: float = 0.02,
                    output_std: float | None = None) -> dict[str, np.ndarray]:
    """normal(0, std) weights, output_std (default std) for the FC2s, which write into the residual stream."""
    rng = np.random.default_rng(seed)
    out_std = std if output_std is None else output_std
    return {n: (rng.standard_normal(s) * (out_std if n in (FC2, SHARED_FC2) else std)).astype(dtype)
            for n, s in moe_param_shapes(hidden_size, moe).items()}


@dataclass
class MoESaved:
    """What one MoE forward keeps for its backward, and what it tells the caller."""

    x2: object  # the input as [T, h]
    routing: Routing
    permutation: Permutation
    experts: tuple
    shared: tuple | None

    @property
    def losses(self) -> dict[str, float | None]:
        return self.routing.losses

    @property
    def tokens_per_expert(self) -> np.ndarray:
        return self.routing.tokens_per_expert


def moe_forward(x, params, moe, expert_bias=None, fl: Flops | None = None, routed_tokens_per_expert=None,
                reduce_counts=None):
    """The MoE layer on x [s, b, h]; returns (y [s, b, h], MoESaved). The auxiliary losses (saved.losses) are
    the caller's to add to its loss; routed_tokens_per_expert is the routing of a size-only run."""
    s, b, h = x.shape
    x2 = x.reshape(s * b, h)
    logits = linear(x2, params[ROUTER], fl=fl)
    routing = route(logits, moe, s, expert_bias, routed_tokens_per_expert, reduce_counts)
    perm = permutation(routing.routing_map, routing.tokens_per_expert)
    rows = permute(x2, perm)
    out, experts_cache = experts_forward(rows, perm.tokens_per_expert, permute_probs(routing.probs, perm),
                                         params[FC1], params[FC2], moe.swiglu, fl)
    y = unpermute(out, perm)
    shared = None
    if moe.moe_shared_expert_intermediate_size is not None:
        ys, shared = shared_expert_forward(x2, params[SHARED_FC1], params[SHARED_FC2], moe.swiglu,
                                           params.get(SHARED_GATE), fl)
        y = y + ys
    return y.reshape(s, b, h), MoESaved(x2, routing, perm, experts_cache, shared)


def moe_backward(dy, saved: MoESaved, params, grads, moe, fl: Flops | None = None, aux_loss_grad: float = 1.0):
    """Adds every parameter's gradient to grads (same names as params); returns dx [s, b, h]. aux_loss_grad: the
    weight of one unit of auxiliary loss in the objective (1 if the losses were added to it as they are)."""
    s, b, h = dy.shape
    dy2 = dy.reshape(s * b, h)
    perm = saved.permutation
    drows, drow_probs = experts_backward(permute(dy2, perm), saved.experts, params[FC1], params[FC2], grads[FC1],
                                         grads[FC2], moe.swiglu, fl)
    dx = unpermute(drows, perm)
    dlogits = route_backward(unpermute_probs(drow_probs, perm), saved.routing, aux_loss_grad)
    dx = dx + linear_backward(saved.x2, params[ROUTER], dlogits, grads[ROUTER], fl=fl)
    if saved.shared is not None:
        dx = dx + shared_expert_backward(dy2, saved.shared, params[SHARED_FC1], params[SHARED_FC2], grads[SHARED_FC1],
                                         grads[SHARED_FC2], moe.swiglu, params.get(SHARED_GATE),
                                         grads.get(SHARED_GATE), fl)
    return dx.reshape(s, b, h)

