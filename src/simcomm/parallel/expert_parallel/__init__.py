"""Expert parallelism, numerically: the experts of an MoE layer sharded over expert_model_parallel_size ranks (and
each expert over expert_tensor_parallel_size), the routed rows exchanged with all-to-all (exchange.py)."""
from .exchange import ExpertParallel

__all__ = ["ExpertParallel"]
