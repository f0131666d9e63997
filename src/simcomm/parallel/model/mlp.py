"""The lecture's MLP (the seeds' DP/TP/PP examples): `num_layers` square layers x -> gelu(x @ W), no biases,
trained to shrink the mean square of its output. Numpy, exact-erf GELU (torch's default), hand-written backward.

Each function takes the weights a rank holds (all of them, a column slice for tensor parallelism, a run of
layers for pipeline parallelism), so the parallel examples reuse it unchanged.
"""
from __future__ import annotations

import math

import numpy as np

from .layers import Flops, gelu_exact, gelu_exact_backward, linear, linear_backward


def init_params(num_dim: int, num_layers: int, seed: int = 0, dtype="float64") -> list[np.ndarray]:
    """num_layers weights of num_dim x num_dim, normal / sqrt(num_dim), the same for any layout."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((num_dim, num_dim)) / math.sqrt(num_dim)).astype(dtype)
            for _ in range(num_layers)]


def layer_forward(x, w, fl: Flops | None = None):
    """gelu(x @ w); returns (output, what backward needs)."""
    z = linear(x, w, fl=fl)
    a, cache = gelu_exact(z)
    return a, (x, cache)


def layer_backward(saved, w, da, dw, need_dx: bool = True, fl: Flops | None = None):
    """Adds the weight gradient to dw; returns the input gradient (or None)."""
    x, cache = saved
    return linear_backward(x, w, gelu_exact_backward(da, cache), dw, need_dx=need_dx, fl=fl)


def forward(x, params, fl: Flops | None = None):
    saved = []
    for w in params:
        x, s = layer_forward(x, w, fl)
        saved.append(s)
    return x, saved


def backward(saved, params, dout, grads, need_dx: bool = False, fl: Flops | None = None):
    d = dout
    for i in reversed(range(len(params))):
        d = layer_backward(saved[i], params[i], d, grads[i], need_dx=need_dx or i > 0, fl=fl)
    return d


def mean_square(out, count: int | None = None):
    """Loss sum(out^2) / count (count: the elements of the whole batch; default out's own) and its gradient."""
    count = out.size if count is None else count
    return float((out * out).sum() / count), 2.0 * out / count


def train_serial(data, params, optimizer, num_steps: int):
    """The whole batch on one process: the reference for the parallel examples. Returns (params, losses)."""
    params = [p.copy() for p in params]
    states = [optimizer.state(p) for p in params]
    losses = []
    for _ in range(num_steps):
        out, saved = forward(data, params)
        loss, dout = mean_square(out)
        grads = [np.zeros_like(p) for p in params]
        backward(saved, params, dout, grads)
        for p, g, s in zip(params, grads, states):
            optimizer.step(p, g, s)
        losses.append(loss)
    return params, losses
