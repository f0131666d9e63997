"""What each data-parallel sharding scheme shards, over the dp x cp ranks that hold the same weights.

One description per scheme, read by everything that depends on it: the numeric parameter stores (store.py,
zero.py), their timing policies (timing.py) and the memory accounting (model/memory.py).

- DDP (ZeRO stage 0): nothing; gradients all-reduced.
- the distributed optimizer (ZeRO-1, Megatron-LM's use_distributed_optimizer): the optimizer state; gradients
  reduce-scattered once per step, updated parameters all-gathered.
- ZeRO-2: also the gradients, so they are reduce-scattered after every micro-batch (no rank keeps them whole).
- ZeRO-3 / FSDP: also the weights, gathered unit by unit before they are used.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sharding:
    name: str
    zero_stage: int
    optimizer_state: bool
    gradients: bool
    weights: bool

    @property
    def reduce_scatter(self) -> bool:
        """Gradients are reduce-scattered (each rank keeps its shard of the sum) rather than all-reduced."""
        return self.optimizer_state

    @property
    def reduce_each_microbatch(self) -> bool:
        """Gradients cannot accumulate over micro-batches: each one's are reduced at once."""
        return self.gradients

    @property
    def gather_weights(self) -> bool:
        """Weights are gathered before each use (and freed after)."""
        return self.weights


SCHEMES = {0: Sharding("DDP", 0, False, False, False),
           1: Sharding("distributed optimizer (ZeRO-1)", 1, True, False, False),
           2: Sharding("ZeRO-2", 2, True, True, False),
           3: Sharding("ZeRO-3 / FSDP", 3, True, True, True)}


def sharding(zero_stage: int) -> Sharding:
    return SCHEMES[zero_stage]


__all__ = ["SCHEMES", "Sharding", "sharding"]
