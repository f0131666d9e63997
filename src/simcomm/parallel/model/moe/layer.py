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


class LocalExperts:
    """Where the routed rows meet their experts when one rank holds every expert: they stay. Expert parallelism
    (parallel/expert_parallel/) replaces it with all-to-all exchanges; the interface is the same.

    dispatch(rows, probs, tokens_per_expert) -> (the rows this rank's experts compute, their probabilities,
    rows per local expert, what combine needs); combine(out, ctx) -> the output rows back in this rank's permuted
    order; combine_backward and dispatch_backward are their adjoints."""

    def dispatch(self, rows, probs, tokens_per_expert):
        return rows, probs, tokens_per_expert, None

    def combine(self, out, ctx):
        return out

    def combine_backward(self, drows, ctx):
        return drows

    def dispatch_backward(self, drows, dprobs, ctx):
        return drows, dprobs


class LocalShared:
    """The shared expert on this rank's tokens with whole weights (tensor parallelism replaces it)."""

    def __init__(self, params, moe, fl: Flops | None = None, grads=None):
        self.params, self.moe, self.fl, self.grads = params, moe, fl, grads

    def forward(self, x2):
        p = self.params
        return shared_expert_forward(x2, p[SHARED_FC1], p[SHARED_FC2], self.moe.swiglu, p.get(SHARED_GATE), self.fl)

    def backward(self, dy2, cache, grads):
        p = self.params
        return shared_expert_backward(dy2, cache, p[SHARED_FC1], p[SHARED_FC2], grads[SHARED_FC1], grads[SHARED_FC2],
                                      self.moe.swiglu, p.get(SHARED_GATE), grads.get(SHARED_GATE), self.fl)


def _no_charge(name: str, counts=None) -> None:
    pass


def activation_kernel(prefix: str, moe) -> str:
    """The activation's kernel name, as the layer's programs list it (model/programs.py)."""
    return f"{prefix}.{'swiglu' if moe.swiglu else 'gelu'}"


@dataclass
class MoESaved:
    """What one MoE forward keeps for its backward, and what it tells the caller."""

    x2: object  # the input as [T, h]
    routing: Routing
    permutation: Permutation
    experts: tuple
    shared: tuple | None
    exchange: object = None  # what the experts' dispatcher keeps for combine and the backward
    local_tokens: object = None  # rows each local expert computed

    @property
    def losses(self) -> dict[str, float | None]:
        return self.routing.losses

    @property
    def tokens_per_expert(self) -> np.ndarray:
        return self.routing.tokens_per_expert


def moe_forward(x, params, moe, expert_bias=None, fl: Flops | None = None, routed_tokens_per_expert=None,
                reduce_counts=None, experts=None, shared=None, charge=None):
    """The MoE layer on x [s, b, h]; returns (y [s, b, h], MoESaved). The auxiliary losses (saved.losses) are
    the caller's to add to its loss; routed_tokens_per_expert is the routing of a size-only run. experts: where
    the rows meet their experts (LocalExperts, or expert parallelism's exchanges; params then hold this rank's
    experts only); shared: the shared expert (LocalShared, or its tensor-parallel form); charge(kernel name,
    rows per local expert): the compute time of each kernel (numeric training's clock)."""
    s, b, h = x.shape
    experts, charge = experts or LocalExperts(), charge or _no_charge
    x2 = x.reshape(s * b, h)
    logits = linear(x2, params[ROUTER], fl=fl)
    charge("router")
    routing = route(logits, moe, s, expert_bias, routed_tokens_per_expert, reduce_counts)
    charge("router.topk")
    perm = permutation(routing.routing_map, routing.tokens_per_expert)
    rows = permute(x2, perm)
    charge("moe.permute")
    rows, probs, counts, exchange = experts.dispatch(rows, permute_probs(routing.probs, perm), perm.tokens_per_expert)
    out, experts_cache = experts_forward(rows, counts, probs, params[FC1], params[FC2], moe.swiglu, fl)
    for name in ("moe.fc1", activation_kernel("moe", moe), "moe.fc2"):
        charge(name, counts)
    y = unpermute(experts.combine(out, exchange), perm)
    charge("moe.unpermute")
    shared_cache = None
    if moe.moe_shared_expert_intermediate_size is not None:
        ys, shared_cache = (shared or LocalShared(params, moe, fl)).forward(x2)
        y = y + ys
    return y.reshape(s, b, h), MoESaved(x2, routing, perm, experts_cache, shared_cache, exchange, counts)


def moe_backward(dy, saved: MoESaved, params, grads, moe, fl: Flops | None = None, aux_loss_grad: float = 1.0,
                 experts=None, shared=None, charge=None):
    """Adds every parameter's gradient to grads (same names as params); returns dx [s, b, h]. aux_loss_grad: the
    weight of one unit of auxiliary loss in the objective (1 if the losses were added to it as they are).
    experts, shared, charge: as moe_forward's."""
    s, b, h = dy.shape
    experts, charge = experts or LocalExperts(), charge or _no_charge
    dy2 = dy.reshape(s * b, h)
    perm = saved.permutation
    drows = experts.combine_backward(permute(dy2, perm), saved.exchange)
    charge("moe.unpermute.backward")
    drows, drow_probs = experts_backward(drows, saved.experts, params[FC1], params[FC2], grads[FC1], grads[FC2],
                                         moe.swiglu, fl)
    for name in ("moe.fc2.dgrad", "moe.fc2.wgrad", activation_kernel("moe", moe) + ".backward", "moe.fc1.dgrad",
                 "moe.fc1.wgrad"):
        charge(name, saved.local_tokens)
    drows, drow_probs = experts.dispatch_backward(drows, drow_probs, saved.exchange)
    dx = unpermute(drows, perm)
    charge("moe.permute.backward")
    dlogits = route_backward(unpermute_probs(drow_probs, perm), saved.routing, aux_loss_grad)
    charge("router.topk.backward")
    dx = dx + linear_backward(saved.x2, params[ROUTER], dlogits, grads[ROUTER], fl=fl)
    charge("router.dgrad"), charge("router.wgrad")
    if saved.shared is not None:
        dx = dx + (shared or LocalShared(params, moe, fl)).backward(dy2, saved.shared, grads)
    return dx.reshape(s, b, h)
