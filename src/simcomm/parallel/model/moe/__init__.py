"""Mixture of experts, numerically: Megatron-Core's MoE layer as numpy functions with a hand-written backward."""
from .config import MoEConfig, check_moe, get_capacity, moe_layer_pattern, parse_moe_layer_freq

__all__ = ["MoEConfig", "check_moe", "get_capacity", "moe_layer_pattern", "parse_moe_layer_freq"]
