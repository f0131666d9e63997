"""A model chunk's parameters when it holds experts: two data-parallel stores, as Megatron-Core keeps two gradient
buffers. The experts' parameters are reduced over their expert-data-parallel group (the ranks that hold the same
experts: edp = world / (etp ep pp)), everything else over dp x cp. The loss is normalised by the global batch, so
both reductions are plain sums: an expert's gradient already holds every token routed to it from its EP group, and
the sum over edp adds the other EP groups' (Megatron scales expert gradients by edp / (dp cp) because it averages).
"""
from __future__ import annotations


class ExpertStores:
    """The GPTChunk store interface (param, grad, begin, end, last_microbatch) over a dense and an expert store."""

    def __init__(self, dense, experts, expert_names):
        self.dense, self.experts = dense, experts
        self.expert_names = frozenset(expert_names)

    def _of(self, name):
        return self.experts if name in self.expert_names else self.dense

    def param(self, name):
        return self._of(name).param(name)

    def grad(self, name):
        return self._of(name).grad(name)

    def begin(self, unit: str, phase: str) -> None:
        self.dense.begin(unit, phase)
        self.experts.begin(unit, phase)

    def end(self, unit: str, phase: str) -> None:
        self.dense.end(unit, phase)
        self.experts.end(unit, phase)

    @property
    def last_microbatch(self) -> bool:
        return self.dense.last_microbatch

    @last_microbatch.setter
    def last_microbatch(self, last: bool) -> None:
        self.dense.last_microbatch = self.experts.last_microbatch = last

    @property
    def parts(self) -> tuple:
        return self.dense, self.experts


__all__ = ["ExpertStores"]
