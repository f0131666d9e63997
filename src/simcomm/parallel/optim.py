"""Optimizers on numpy arrays, elementwise so they give the same result on a whole parameter, a flat bucket of
parameters or one rank's shard of it (ZeRO): SGD (with momentum and weight decay) and AdamW, each following
torch.optim's single-tensor update step by step.

`decay` is 1 where weight decay applies and 0 where it does not (biases and norms): a scalar or one value per
element of a flat buffer. Size-only tensors are left alone (there is nothing to update).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SimcommError
from .model.tensor import is_meta


@dataclass(frozen=True)
class SGD:
    """torch.optim.SGD: g = grad + wd * p; buf = momentum * buf + g (buf = g at the first step); p -= lr * buf."""

    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0
    name = "sgd"

    def state(self, param) -> dict:
        return {"step": 0}

    def step(self, param, grad, state: dict, decay=1.0) -> None:
        if is_meta(param, grad):
            return
        state["step"] += 1
        g = grad + (self.weight_decay * decay) * param if self.weight_decay else grad
        if self.momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = np.array(g, copy=True)
            else:
                buf *= self.momentum
                buf += g
            g = buf
        param -= self.lr * g


@dataclass(frozen=True)
class AdamW:
    """torch.optim.AdamW (decoupled weight decay, bias correction), its single-tensor step."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    name = "adamw"

    def state(self, param) -> dict:
        if is_meta(param):
            return {"step": 0}
        return {"step": 0, "exp_avg": np.zeros_like(param), "exp_avg_sq": np.zeros_like(param)}

    def step(self, param, grad, state: dict, decay=1.0) -> None:
        if is_meta(param, grad):
            return
        beta1, beta2 = self.betas
        state["step"] += 1
        t = state["step"]
        if self.weight_decay:
            param *= 1 - self.lr * self.weight_decay * decay
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m += (1 - beta1) * (grad - m)  # torch's lerp(grad, 1 - beta1) for weights below 0.5
        v *= beta2
        v += (1 - beta2) * grad * grad
        step_size = self.lr / (1 - beta1 ** t)
        denom = np.sqrt(v) / (1 - beta2 ** t) ** 0.5 + self.eps
        param -= step_size * (m / denom)

    def state_bytes_per_element(self, itemsize: int) -> int:
        return 2 * itemsize


def make_optimizer(name: str = "adamw", **kwargs):
    """An optimizer by name ('sgd' or 'adamw') with torch's keyword names (lr, momentum, betas, eps,
    weight_decay)."""
    key = name.strip().lower()
    kinds = {"sgd": SGD, "adamw": AdamW}
    if key not in kinds:
        raise SimcommError(f"unknown optimizer {name!r}; expected one of {', '.join(kinds)}")
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    try:
        return kinds[key](**kwargs)
    except TypeError as exc:
        raise SimcommError(f"optimizer {key}: {exc}") from None
