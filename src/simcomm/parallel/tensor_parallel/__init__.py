"""Tensor parallelism (Megatron-LM): column- and row-parallel linears, vocabulary-parallel embedding and
cross-entropy, with or without sequence parallelism. The layers themselves are in model/gpt.py; this package holds
the communication regions around them (mappings.py) and how parameters are split (the ParamSpecs' `split`)."""
from .mappings import TensorParallel

__all__ = ["TensorParallel"]
