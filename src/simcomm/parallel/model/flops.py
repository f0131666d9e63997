"""Parameters and FLOPs of a decoder-only transformer (shared/reference/training-cost-model.md sections 1-2).

Only matrix products are counted (2mnk for (m x k) @ (k x n)); backward = 2 x forward. Every formula says whose
it is. `FORMULAS` maps a name to the model-FLOPs-per-token function used for MFU; the step report says which
it used. Core attention is counted over the full s x s score matrix (as Narayanan, Korthikanti and Megatron
before mid-2024 do) unless `causal=True` halves it (Megatron main's `/ 2 # causal mask`).
"""
from __future__ import annotations

from .config import TransformerConfig
from .layer import LayerShape, decoder_layer, forward_flops_per_token
from .moe.flops import megatron_moe_flops_per_token


# ---- parameters ------------------------------------------------------------------------------------------------
def attention_params(c: TransformerConfig) -> int:
    """QKV and output projections (biases when add_bias_linear): h(q + 2kv) + q h; with multi-latent attention
    the down and up projections and their norms."""
    if c.multi_latent_attention:
        return _mla_params(c)
    q, kv, h = c.query_projection_size, c.kv_projection_size, c.hidden_size
    bias = (q + 2 * kv + h) if c.add_bias_linear else 0
    return h * (q + 2 * kv) + q * h + bias


def _mla_params(c: TransformerConfig) -> int:
    h, a, dq, dr, dv = c.hidden_size, c.num_attention_heads, c.qk_head_dim, c.qk_pos_emb_head_dim, c.v_head_dim
    rkv, rq = c.kv_lora_rank, c.q_lora_rank
    q = h * a * (dq + dr) if rq is None else h * rq + rq + rq * a * (dq + dr)
    return q + h * (rkv + dr) + rkv + rkv * a * (dq + dv) + a * dv * h


def expert_params(c: TransformerConfig) -> int:
    """An MoE layer's routed experts: E x (h up + f h)."""
    f = c.moe_ffn_hidden_size
    return c.num_moe_experts * (c.hidden_size * (2 * f if c.swiglu else f) + f * c.hidden_size)


def moe_dense_params(c: TransformerConfig) -> int:
    """An MoE layer's MLP parameters besides the routed experts: the router, the shared expert and its gate."""
    h, fs = c.hidden_size, c.moe_shared_expert_intermediate_size or 0
    return h * c.num_moe_experts + h * (2 * fs if c.swiglu else fs) + fs * h + (h if c.moe_shared_expert_gate else 0)


def mlp_params(c: TransformerConfig) -> int:
    """2hf (GELU) or 3hf (SwiGLU), plus biases."""
    h, f = c.hidden_size, c.ffn_hidden_size
    up = 2 * f if c.swiglu else f
    bias = (up + h) if c.add_bias_linear else 0
    return h * up + f * h + bias


def norm_params(c: TransformerConfig) -> int:
    """Two norms per layer: weight (and bias for LayerNorm)."""
    return 2 * c.hidden_size * (2 if c.normalization == "LayerNorm" else 1)


def layer_params(c: TransformerConfig, moe: bool = False) -> int:
    """One decoder layer's parameters (an MoE layer's: every expert)."""
    mlp = moe_dense_params(c) + expert_params(c) if moe else mlp_params(c)
    return attention_params(c) + mlp + norm_params(c)


def layer_params_per_gpu(c: TransformerConfig, tp: int, moe: bool = False, ep: int = 1, etp: int = 1) -> float:
    """One layer's parameters on one GPU of a TP group: its matrices (and their biases) split, its norms whole; an
    MoE layer's router and gate whole, shared expert split over TP, routed experts over EP x ETP."""
    if not moe:
        return (attention_params(c) + mlp_params(c)) / tp + norm_params(c)
    router = c.hidden_size * (c.num_moe_experts + (1 if c.moe_shared_expert_gate else 0))
    return (attention_params(c) + moe_dense_params(c) - router) / tp + router + norm_params(c) + \
        expert_params(c) / (ep * etp)


def embedding_params(c: TransformerConfig) -> int:
    """Input embedding table (V h) plus learned positions (s h) when used."""
    pos = c.seq_length * c.hidden_size if c.position_embedding_type == "learned_absolute" else 0
    return c.padded_vocab_size * c.hidden_size + pos


def output_params(c: TransformerConfig) -> int:
    """Final norm, plus the output layer V h when untied (tied: it is the embedding table)."""
    final_norm = c.hidden_size * (2 if c.normalization == "LayerNorm" else 1)
    return final_norm + (c.padded_vocab_size * c.hidden_size if c.untie_embeddings_and_output_weights else 0)


def parameter_count(c: TransformerConfig) -> int:
    """Every parameter of the model."""
    return sum(layer_params(c, moe) for moe in c.moe_layers) + embedding_params(c) + output_params(c)


def narayanan_parameters(c: TransformerConfig) -> float:
    """Narayanan et al. 2021 eq. 2 (GPT, tied embeddings, learned positions): 12Lh^2(1 + 13/(12h) + (V+s)/(12Lh))."""
    L, h, V, s = c.num_layers, c.hidden_size, c.padded_vocab_size, c.seq_length
    return 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h))


# ---- FLOPs per token -------------------------------------------------------------------------------------------
def logits_forward_flops_per_token(c: TransformerConfig) -> float:
    return 2.0 * c.hidden_size * c.padded_vocab_size


def megatron_flops_per_token(c: TransformerConfig, causal: bool = False) -> float:
    """Megatron-LM's num_floating_point_operations per token (forward + backward, no recompute):
    12 L h^2 [(1 + g/a + s/h) q/h + (f/h)(3/2 if SwiGLU else 1) + V/(2Lh)], s/h halved when causal."""
    if c.is_moe or c.multi_latent_attention:
        return _megatron_moe_flops_per_token(c, causal)
    L, h, a, g = c.num_layers, c.hidden_size, c.num_attention_heads, c.num_query_groups
    s, V, f, q = c.seq_length, c.padded_vocab_size, c.ffn_hidden_size, c.query_projection_size
    attn = (1 + g / a + (s / h) * (0.5 if causal else 1.0)) * (q / h)
    return 12.0 * L * h * h * (attn + (f / h) * (1.5 if c.swiglu else 1.0) + V / (2 * L * h))


def _megatron_moe_flops_per_token(c: TransformerConfig, causal: bool) -> float:
    """Megatron's count for MoE and MLA models: three times every layer's forward GEMMs per token (attention's from
    the layer's description, so MLA's projections), an MoE layer's MLP as its active parameters (the top-k routed
    experts and the shared expert: moe/flops.py; not the router), a dense layer's 12 h f (3/2 with SwiGLU), and
    the logits 6 h V."""
    groups = forward_flops_per_token(c, causal)
    attention = 3.0 * (groups["qkv"] + groups["core_attention"] + groups["proj"])
    dense_mlp = 12.0 * c.hidden_size * c.ffn_hidden_size * (1.5 if c.swiglu else 1.0)
    mlp = sum(megatron_moe_flops_per_token(c.hidden_size, c) if moe else dense_mlp for moe in c.moe_layers)
    return c.num_layers * attention + mlp + 3.0 * logits_forward_flops_per_token(c)


def narayanan_flops_per_token(c: TransformerConfig, recompute: bool = False) -> float:
    """Narayanan et al. 2021: 72 L h^2 (1 + s/(6h) + V/(12hL)) per token, or with full recomputation (their eq. 3,
    what their TFLOP/s per GPU divides by) 96 L h^2 (1 + s/(6h) + V/(16hL)). GPT blocks (f = 4h, MHA)."""
    L, h, s, V = c.num_layers, c.hidden_size, c.seq_length, c.padded_vocab_size
    if recompute:
        return 96.0 * L * h * h * (1 + s / (6 * h) + V / (16 * h * L))
    return 72.0 * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))


def selective_recompute_flops_per_token(c: TransformerConfig) -> float:
    """Korthikanti et al. 2022: hardware FLOPs with selective recomputation, 72 L h^2 (1 + s/(3h) + V/(12hL)).
    Its recomputation term is three forwards of core attention; the step model counts the one it runs
    (`recompute_flops_per_token`)."""
    L, h, s, V = c.num_layers, c.hidden_size, c.seq_length, c.padded_vocab_size
    return 72.0 * L * h * h * (1 + s / (3 * h) + V / (12 * h * L))


def torchtitan_flops_per_token(c: TransformerConfig) -> float:
    """torchtitan: 6 N_matmul + 12 L h s, N_matmul = every parameter but the input embedding (unless tied)."""
    n = parameter_count(c) - (embedding_params(c) if c.untie_embeddings_and_output_weights else 0)
    return 6.0 * n + 12.0 * c.num_layers * c.hidden_size * c.seq_length


def six_n_flops_per_token(c: TransformerConfig) -> float:
    """"6N": 6 x every parameter (embeddings included), attention ignored."""
    return 6.0 * parameter_count(c)


FORMULAS = {
    "megatron": ("Megatron-LM num_floating_point_operations (mid-2024 form)", megatron_flops_per_token),
    "megatron_causal": ("Megatron-LM num_floating_point_operations with the causal halving of core attention",
                        lambda c: megatron_flops_per_token(c, causal=True)),
    "narayanan": ("Narayanan et al. 2021: 72BLsh^2(1 + s/6h + V/12hL)", narayanan_flops_per_token),
    "torchtitan": ("torchtitan: 6 N_matmul + 12 L h s per token", torchtitan_flops_per_token),
    "6N": ("6 x parameters per token", six_n_flops_per_token),
}


def recompute_flops_per_token(c: TransformerConfig, granularity: str | None, recomputed_layers: int | None = None,
                              causal: bool = False, modules: tuple[str, ...] = ("core_attn",)) -> float:
    """Extra forward FLOPs per token that recomputation executes: full reruns each recomputed layer's forward
    (logits are not recomputed); selective its `modules`' products: core attention (core_attn), MLA's up
    projections (mla_up_proj); norms and activations have none."""
    if not granularity:
        return 0.0
    per_layer = forward_flops_per_token(c, causal)
    layers = c.num_layers if recomputed_layers is None else recomputed_layers
    if granularity == "full":
        return layers * sum(per_layer.values())
    out = per_layer["core_attention"] if "core_attn" in modules else 0.0
    if "mla_up_proj" in modules:
        out += sum(op.flops_per_token for op in decoder_layer(LayerShape(c, 1, 1, False, 1))
                   if op.name in ("q_up", "kv_up"))
    return c.num_layers * out
