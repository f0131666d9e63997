"""The experts: MLPs without biases (SwiGLU, or the GELU MLP of the dense layers), and the shared expert.

`experts_forward` is what a rank runs on the rows its experts received: rows [N, h] grouped by local expert,
tokens_per_expert [E_local] rows each, each row's routing probability, and the local experts' stacked weights
fc1 [E_local, h, 2f or f] (SwiGLU: [gate | up] halves) and fc2 [E_local, f, h]. Each expert multiplies its
activation by the row's probability before FC2, as Megatron-Core's grouped MLP does (moe_apply_probs_on_input
off), so its output rows come back already weighted. One GEMM pair per expert, each counted in `fl` with the rows
that expert really has: a grouped GEMM's work.
"""
from __future__ import annotations

import numpy as np

from ..layers import Flops, gelu, gelu_backward, linear, linear_backward, sigmoid, swiglu, swiglu_backward
from ..tensor import Meta, concat, is_meta


def _activation(z, use_swiglu: bool):
    return swiglu(z) if use_swiglu else gelu(z)


def _activation_backward(da, cache, use_swiglu: bool):
    return swiglu_backward(da, cache) if use_swiglu else gelu_backward(da, cache)


def expert_forward(x, fc1, fc2, use_swiglu: bool, probs=None, fl: Flops | None = None):
    """One MLP on x [n, h]: act(x fc1) (times probs [n], when given) fc2. Returns (y, cache)."""
    z = linear(x, fc1, fl=fl)
    a, act_cache = _activation(z, use_swiglu)
    weighted = a if probs is None else a * probs[:, None]
    return linear(weighted, fc2, fl=fl), (x, a, weighted, act_cache, probs)


def expert_backward(dy, cache, fc1, fc2, dfc1, dfc2, use_swiglu: bool, fl: Flops | None = None):
    """Adds to dfc1, dfc2; returns (dx, dprobs) (dprobs None when the forward had no probs)."""
    x, a, weighted, act_cache, probs = cache
    dweighted = linear_backward(weighted, fc2, dy, dfc2, fl=fl)
    if probs is None:
        da, dprobs = dweighted, None
    elif is_meta(dweighted, a):
        da, dprobs = dweighted, Meta(probs.shape, probs.dtype)
    else:
        da, dprobs = dweighted * probs[:, None], (dweighted * a).sum(axis=1)
    dz = _activation_backward(da, act_cache, use_swiglu)
    return linear_backward(x, fc1, dz, dfc1, fl=fl), dprobs


def _chunks(tokens_per_expert):
    starts = np.concatenate([[0], np.cumsum(tokens_per_expert)]).astype(int)
    return list(zip(starts[:-1], starts[1:]))


def experts_forward(rows, tokens_per_expert, row_probs, fc1, fc2, use_swiglu: bool, fl: Flops | None = None):
    """The local experts on their rows (see the module docstring). Returns (output rows [N, h], cache)."""
    outs, caches = [], []
    for e, (a, b) in enumerate(_chunks(tokens_per_expert)):
        y, c = expert_forward(rows[a:b], fc1[e], fc2[e], use_swiglu, row_probs[a:b], fl)
        outs.append(y)
        caches.append(c)
    return concat(outs, axis=0), (caches, tokens_per_expert)


def experts_backward(dout, cache, fc1, fc2, dfc1, dfc2, use_swiglu: bool, fl: Flops | None = None):
    """Adds to the stacked gradients dfc1, dfc2; returns (drows [N, h], drow_probs [N])."""
    caches, tokens_per_expert = cache
    drows, dprobs = [], []
    for e, (a, b) in enumerate(_chunks(tokens_per_expert)):
        dx, dp = expert_backward(dout[a:b], caches[e], fc1[e], fc2[e], dfc1[e], dfc2[e], use_swiglu, fl)
        drows.append(dx)
        dprobs.append(dp)
    return concat(drows, axis=0), concat(dprobs, axis=0)


# ---- the shared expert ----------------------------------------------------------------------------------------
def shared_expert_forward(x, fc1, fc2, use_swiglu: bool, gate_weight=None, fl: Flops | None = None):
    """Megatron's SharedExpertMLP on every token x [T, h]: one MLP of width moe_shared_expert_intermediate_size,
    its output scaled by sigmoid(x gate_weight) (gate_weight [h, 1]) when moe_shared_expert_gate. Returns (y,
    cache)."""
    y, c = expert_forward(x, fc1, fc2, use_swiglu, fl=fl)
    if gate_weight is None:
        return y, (c, None)
    gate = sigmoid(linear(x, gate_weight, fl=fl))
    return y * gate, (c, (x, y, gate))


def shared_expert_backward(dy, cache, fc1, fc2, dfc1, dfc2, use_swiglu: bool, gate_weight=None, dgate_weight=None,
                           fl: Flops | None = None):
    """Adds to the gradients; returns dx."""
    c, gated = cache
    if gated is None:
        return expert_backward(dy, c, fc1, fc2, dfc1, dfc2, use_swiglu, fl)[0]
    x, y, gate = gated
    if is_meta(dy, gate):
        dlogit, dy_mlp = Meta(gate.shape, gate.dtype), dy
    else:
        dlogit, dy_mlp = (dy * y).sum(axis=1, keepdims=True) * gate * (1.0 - gate), dy * gate
    dx = expert_backward(dy_mlp, c, fc1, fc2, dfc1, dfc2, use_swiglu, fl)[0]
    return dx + linear_backward(x, gate_weight, dlogit, dgate_weight, fl=fl)
