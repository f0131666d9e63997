"""The backward split in two, as zero-bubble pipelines run it (Qi et al. 2023; DeepSeek's WeightGradStore): the
input-gradient pass (I) computes what the previous stage waits for and sets the weight gradients aside; the
weight-gradient pass (W) adds them to the store later, unit by unit in the backward's order, and only then marks
each unit's gradients final (which starts their data-parallel reduction).

Each weight gradient is computed by I into a fresh buffer (x^T dy into zeros is x^T dy exactly) and added by W in
one step, as a whole backward adds it: the sums run in the same order, so splitting changes no bit. The word
embedding's scatter-add, which may add one row several times, runs whole in W for the same reason. The kernels
that compute weight gradients (*.wgrad, the embedding's scatter) are charged to W.
"""
from __future__ import annotations

from typing import Callable

from .tensor import is_meta, zeros

BACKWARD_INPUT = "backward_input"  # the phase a store sees during an I pass: parameters used, no gradient final


def is_weight_gradient_kernel(name: str) -> bool:
    return name.endswith(".wgrad") or name == "embedding.backward"


class DeferredWeightGrads:
    """One micro-batch's weight gradients through one model chunk, between its I and its W."""

    def __init__(self):
        self.units: list[tuple[str, dict, list, list]] = []  # (unit, {name: buffer}, [later], [kernels])

    def begin(self, unit: str) -> None:
        self.units.append((unit, {}, [], []))

    def grad(self, name: str, param):
        """The buffer the I pass accumulates parameter `name`'s gradient into."""
        buffers = self.units[-1][1]
        if name not in buffers:
            buffers[name] = zeros(param.shape, param.dtype, is_meta(param))
        return buffers[name]

    def later(self, fn: Callable[[], None]) -> None:
        """Run fn in the W pass (a gradient that must be added in place, not through a buffer)."""
        self.units[-1][2].append(fn)

    def charge(self, kernel: str) -> None:
        self.units[-1][3].append(kernel)

    def apply(self, store, charge: Callable[[str], None], backward: str) -> None:
        """The W pass: every unit's gradients into the store, its kernels charged, the unit's backward ended."""
        for unit, buffers, later, kernels in self.units:
            for name, buf in buffers.items():
                grad = store.grad(name)
                if not is_meta(grad):
                    grad += buf
            for fn in later:
                fn()
            for k in kernels:
                charge(k)
            store.end(unit, backward)


__all__ = ["BACKWARD_INPUT", "DeferredWeightGrads", "is_weight_gradient_kernel"]
