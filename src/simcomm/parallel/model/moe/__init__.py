"""Mixture of experts, numerically: Megatron-Core's MoE layer as numpy functions with a hand-written backward.

config.py (the settings, Megatron's names and checks, which layers are MoE), router.py (scores, top-k, dropping),
balance.py (auxiliary losses, expert bias), dispatch.py (token permutation and the regrouping expert parallelism
needs), experts.py (the expert MLPs on their rows, the shared expert), layer.py (the layer), flops.py.
"""
from .balance import balanced_counts, switch_load_balancing_loss, updated_expert_bias, z_loss
from .config import check_moe, get_capacity, moe_layer_pattern, parse_moe_layer_freq
from .dispatch import (Permutation, chunk_orders, permutation, permute, permute_probs, sort_chunks_by_index,
                       splits_by_rank, unpermute, unpermute_probs)
from .experts import experts_backward, experts_forward, shared_expert_backward, shared_expert_forward
from .flops import layer_forward_flops_per_token, megatron_moe_flops_per_token
from .layer import MoESaved, init_moe_params, moe_backward, moe_forward, moe_param_shapes
from .router import Routing, expert_rows, route, route_backward

__all__ = ["MoESaved", "Permutation", "Routing", "balanced_counts", "check_moe", "chunk_orders",
           "expert_rows", "experts_backward", "experts_forward", "get_capacity", "init_moe_params",
           "layer_forward_flops_per_token", "megatron_moe_flops_per_token", "moe_backward", "moe_forward",
           "moe_layer_pattern", "moe_param_shapes", "parse_moe_layer_freq", "permutation", "permute", "permute_probs",
           "route", "route_backward", "shared_expert_backward", "shared_expert_forward", "sort_chunks_by_index",
           "splits_by_rank", "switch_load_balancing_loss", "unpermute", "unpermute_probs", "updated_expert_bias",
           "z_loss"]
