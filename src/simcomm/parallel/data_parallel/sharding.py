"""What each data-parallel sharding scheme shards, over the dp x cp ranks that hold the same weights.

One description per scheme, read by everything that depends on it: the numeric parameter stores (store.py,
zero.py), their timing policies (timing.py) and the memory accounting (model/memory.py). Each scheme has
Megatron-FSDP's name (`--data-parallel-sharding-strategy`), which the configuration uses, and its ZeRO stage:

- no_shard, DDP (ZeRO stage 0): nothing; gradients all-reduced.
- optim, the distributed optimizer (ZeRO-1, Megatron-LM's use_distributed_optimizer): the optimizer state;
  gradients reduce-scattered once per step, updated parameters all-gathered.
- optim_grads, ZeRO-2: also the gradients, so they are reduce-scattered after every micro-batch (no rank keeps
  them whole).
- optim_grads_params, ZeRO-3 / FSDP: also the weights, gathered unit by unit before they are used (how, each
  framework's way: gathering.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sharding:
    name: str
    strategy: str  # Megatron-FSDP's data_parallel_sharding_strategy
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


SCHEMES = {0: Sharding("DDP", "no_shard", 0, False, False, False),
           1: Sharding("distributed optimizer (ZeRO-1)", "optim", 1, True, False, False),
           2: Sharding("ZeRO-2", "optim_grads", 2, True, True, False),
           3: Sharding("ZeRO-3 / FSDP", "optim_grads_params", 3, True, True, True)}
STRATEGIES = {s.strategy: s.zero_stage for s in SCHEMES.values()}  # Megatron-FSDP's name -> ZeRO stage


def sharding(zero_stage: int) -> Sharding:
    return SCHEMES[zero_stage]


__all__ = ["SCHEMES", "STRATEGIES", "Sharding", "sharding"]
