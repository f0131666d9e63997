"""Parameters and FLOPs of a decoder-only transformer (shared/reference/training-cost-model.md sections 1-2).

Only matrix products are counted (2mnk for (m x k) @ (k x n)); backward = 2 x forward. Every formula says whose
it is. `FORMULAS` maps a name to the model-FLOPs-per-token function used for MFU; the step report says which
it used. Core attention is counted over the full s x s score matrix (as Narayanan, Korthikanti and Megatron
before mid-2024 do) unless `causal=True` halves it (Megatron main's `/ 2 # causal mask`).
"""
from __future__ import annotations

from .config import TransformerConfig
from .layer import forward_flops_per_token


# ---- parameters ------------------------------------------------------------------------------------------------
def attention_params(c: TransformerConfig) -> int:
    """QKV and output projections (biases when add_bias_linear): h(q + 2kv) + q h."""
    q, kv, h = c.query_projection_size, c.kv_projection_size, c.hidden_size
    bias = (q + 2 * kv + h) if c.add_bias_linear else 0
    return h * (q + 2 * kv) + q * h + bias


def mlp_params(c: TransformerConfig) -> int:
    """2hf (GELU) or 3hf (SwiGLU), plus biases."""
    h, f = c.hidden_size, c.ffn_hidden_size
    up = 2 * f if c.swiglu else f
    bias = (up + h) if c.add_bias_linear else 0
    return h * up + f * h + bias


def norm_params(c: TransformerConfig) -> int:
    """Two norms per layer: weight (and bias for LayerNorm)."""
    return 2 * c.hidden_size * (2 if c.normalization == "LayerNorm" else 1)


def layer_params(c: TransformerConfig) -> int:
    return attention_params(c) + mlp_params(c) + norm_params(c)


def layer_params_per_gpu(c: TransformerConfig, tp: int) -> float:
    """One layer's parameters on one GPU of a TP group: its matrices (and their biases) split, its norms whole."""
    return (attention_params(c) + mlp_params(c)) / tp + norm_params(c)


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
    return c.num_layers * layer_params(c) + embedding_params(c) + output_params(c)


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
    L, h, a, g = c.num_layers, c.hidden_size, c.num_attention_heads, c.num_query_groups
    s, V, f, q = c.seq_length, c.padded_vocab_size, c.ffn_hidden_size, c.query_projection_size
    attn = (1 + g / a + (s / h) * (0.5 if causal else 1.0)) * (q / h)
    return 12.0 * L * h * h * (attn + (f / h) * (1.5 if c.swiglu else 1.0) + V / (2 * L * h))


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
                              causal: bool = False) -> float:
    """Extra forward FLOPs per token that recomputation executes: full reruns each recomputed layer's forward
    (logits are not recomputed); selective reruns core attention only."""
    if not granularity:
        return 0.0
    per_layer = forward_flops_per_token(c, causal)
    layers = c.num_layers if recomputed_layers is None else recomputed_layers
    if granularity == "full":
        return layers * sum(per_layer.values())
    return c.num_layers * per_layer["core_attention"]
