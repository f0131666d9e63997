"""FLOPs of an MoE layer as Megatron-LM counts them (training.py num_floating_point_operations; moe.md section 4).

Megatron counts the active parameters' GEMMs: the top-k routed experts and the shared expert, each
2 h m f per token and pass (m = 3 with SwiGLU, else 2), times 3 for forward, weight-gradient and input-gradient.
It leaves out the router (2 h E per token and pass) and the shared expert's gate (2 h): small, but executed, so the
layer's `Flops` counter has them; `layer_forward_flops_per_token` lists every group.
"""
from __future__ import annotations


def layer_forward_flops_per_token(hidden_size: int, moe) -> dict[str, float]:
    """Forward GEMM FLOPs per token of one MoE layer, dropless, by group: router, experts (the k a token goes to),
    shared_experts (with its gate)."""
    h, m = hidden_size, 3 if moe.swiglu else 2
    shared = 0.0
    if moe.moe_shared_expert_intermediate_size is not None:
        shared = 2.0 * h * m * moe.moe_shared_expert_intermediate_size + (2.0 * h if moe.moe_shared_expert_gate else 0)
    return {"router": 2.0 * h * moe.num_moe_experts,
            "experts": 2.0 * h * m * moe.moe_ffn_hidden_size * moe.moe_router_topk,
            "shared_experts": shared}


def megatron_moe_flops_per_token(hidden_size: int, moe) -> float:
    """Megatron's count for one MoE layer per token, forward and backward: 12 h (f_e k + f_sh) (3/2 if SwiGLU)."""
    g = 1.5 if moe.swiglu else 1.0
    shared = moe.moe_shared_expert_intermediate_size or 0
    return 12.0 * hidden_size * (moe.moe_ffn_hidden_size * moe.moe_router_topk + shared) * g
