"""The one description of a transformer decoder layer on one GPU for one micro-batch.

`decoder_layer(shape)` lists the layer's operations in forward order: the matrix products (with how tensor
parallelism splits them: column-parallel QKV and FC1, row-parallel projection and FC2), core attention, and the
memory-bound operations around them (norms, RoPE, the activation, dropout and residual adds), each with the
tensors it keeps for the backward. Everything else is derived from it:

- the kernels and their TP/CP communication, forward and backward (programs.py), which the step model times and
  numeric training charges (through the same ComputeModel);
- the FLOPs per token by GEMM group (flops.py), that is Megatron-LM's num_floating_point_operations;
- the activations one layer saves (memory.py), which reproduce Korthikanti et al. 2022 Table 2.

Conventions: T = b s / cp tokens between the TP collectives; Ts = T / t (sequence parallelism) for the norms,
dropouts and residual adds; e bytes per activation element; a matrix product (m x k) @ (k x n) is 2mnk FLOPs; core
attention's FLOPs are counted over the full s x s score matrix (the formulas' convention) while its kernel does
the causal half. A backward runs the operations in reverse, each product twice (dgrad and wgrad).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .config import TransformerConfig, hash_once


@hash_once
@dataclass(frozen=True)
class LayerShape:
    """Everything the kernels depend on (hashable: programs are cached by it)."""

    model: TransformerConfig
    tp: int
    cp: int
    sp: bool
    micro_batch_size: int
    flash: bool = True
    tp_comm_overlap: bool = False
    elem: int = 2  # activation bytes
    # an MoE layer (moe/ops.py): expert parallelism, the routing (each expert's share; empty: balanced), grouped GEMMs
    moe: bool = False
    ep: int = 1
    etp: int = 1
    routing: tuple[float, ...] = ()
    grouped_gemm: bool = True
    dispatcher: str = "alltoall"  # moe_token_dispatcher_type: alltoall | flex (DeepEP)
    dispatch_fp8: bool = False  # the flex dispatcher's dispatch-shaped exchanges in FP8
    deepep_sms: int = 20  # SMs DeepEP's kernels hold
    shared_expert_overlap: bool = False  # the shared expert's forward beside the dispatch and combine
    recompute_modules: tuple[str, ...] = ("core_attn",)  # what selective recomputation reruns (RECOMPUTED)

    @property
    def tokens(self) -> int:
        """Tokens each GPU holds between the TP collectives: b s / cp."""
        return self.micro_batch_size * self.model.seq_length // self.cp

    @property
    def sp_tokens(self) -> int:
        """Tokens of the norms, dropouts and residual adds: T / t with sequence parallelism."""
        return self.tokens // self.tp if self.sp else self.tokens


@dataclass(frozen=True)
class Pointwise:
    """A memory-bound operation: the bytes it reads and writes forward and backward, its class for the compute
    model (norm, elementwise, softmax), the tensors it keeps."""

    name: str
    forward_bytes: float
    backward_bytes: float
    op_class: str = "elementwise"
    saves: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Linear:
    """Y = X W with X [m, k] and W [k, n] on this GPU; `parallel` column (W split on n: the input is gathered under
    sequence parallelism) or row (W split on k: the output is reduced); `group` its FLOPs group."""

    name: str
    m: int
    n: int
    k: int
    parallel: str  # column | row | none (replicated: no TP communication)
    group: str
    saves: tuple[tuple[str, float], ...] = ()
    gathered: int = 0  # width of the input a column-parallel layer gathers under SP (0: hidden_size)

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.n * self.k


@dataclass(frozen=True)
class CoreAttention:
    """softmax(Q K^T) V over b sequences x `heads` on this GPU, sq queries and skv keys of head_dim d; flash
    (fused, keeps the log-sum-exp) or the materialised s x s scores, softmax and dropout. Selective recomputation
    drops the kept tensors named in SELECTIVE (it reruns this operation before the backward)."""

    batch: int
    heads: int
    sq: int
    skv: int
    head_dim: float
    flash: bool
    dropout: bool
    saves: tuple[tuple[str, float], ...] = ()
    name: str = "core_attention"
    group: str = "core_attention"

    @property
    def batch_heads(self) -> int:
        return self.batch * self.heads

    @property
    def flops(self) -> float:
        """Scores and x V over the full matrix (the formulas' convention), forward."""
        return 4.0 * self.batch_heads * self.sq * self.skv * self.head_dim

    @property
    def flops_per_token(self) -> float:
        return 4.0 * self.heads * self.skv * self.head_dim


@lru_cache(maxsize=4096)
def decoder_layer(shape: LayerShape) -> tuple:
    """The layer's operations in forward order (see the module docstring). Cached: a layout search asks for the
    same few shapes thousands of times."""
    c, t = shape.model, shape.tp
    T, Ts, h, e = shape.tokens, shape.sp_tokens, c.hidden_size, shape.elem
    drop = 1 if c.hidden_dropout > 0 else 0
    mask = (("hidden_dropout_masks", Ts * h),) if drop else ()  # one byte per element, after each residual
    ops = [Pointwise("input_norm", 2 * Ts * h * e, 3 * Ts * h * e, "norm", (("input_norm_input", Ts * h * e),))]
    ops += _mla_projections(shape) if c.multi_latent_attention else _qkv(shape)
    ops += [_core_attention(shape),
            Linear("proj", T, h, c.attention_value_size // t, "row", "proj"),
            Pointwise("attention_residual", Ts * h * (3 * e + drop), 2 * Ts * h * e, saves=mask),
            Pointwise("pre_mlp_norm", 2 * Ts * h * e, 3 * Ts * h * e, "norm", (("pre_mlp_norm_input", Ts * h * e),))]
    if shape.moe:
        from .moe.ops import moe_mlp  # (moe/ops.py builds on this module's operations)
        ops += moe_mlp(shape, Linear, Pointwise)
    else:
        f = c.ffn_hidden_size // t
        up = 2 * f if c.swiglu else f
        ops += [Linear("fc1", T, up, h, "column", "mlp", (("fc1_input", Ts * h * e),)),
                Pointwise("swiglu" if c.swiglu else "gelu", T * (up + f) * e, T * (2 * up + f) * e,
                          saves=(("activation_input", T * up * e),)),
                Linear("fc2", T, h, f, "row", "mlp", (("fc2_input", T * f * e),))]
    ops.append(Pointwise("mlp_residual", Ts * h * (3 * e + drop), 2 * Ts * h * e, saves=mask))
    return tuple(ops)


def _qkv(shape: LayerShape) -> list:
    c, t, T, Ts, h, e = shape.model, shape.tp, shape.tokens, shape.sp_tokens, shape.model.hidden_size, shape.elem
    q, kv = c.query_projection_size // t, c.kv_projection_size // t
    ops = [Linear("qkv", T, q + 2 * kv, h, "column", "qkv", (("qkv_input", Ts * h * e),))]
    if c.position_embedding_type == "rope":
        ops.append(Pointwise("rope", 2 * T * (q + kv) * e, 2 * T * (q + kv) * e))
    return ops


def _mla_projections(shape: LayerShape) -> list:
    """Multi-latent attention (Megatron-Core's MLASelfAttention): queries and keys/values compressed by down
    projections every TP rank runs on its own tokens (q_lora_rank; kv_lora_rank plus the shared RoPE key), normed,
    gathered along the sequence (SP) and expanded by column-parallel up projections; RoPE on the decoupled dims."""
    c, t, T, Ts, h, e = shape.model, shape.tp, shape.tokens, shape.sp_tokens, shape.model.hidden_size, shape.elem
    a, dq, dr, dv, rkv = c.num_attention_heads // t, c.qk_head_dim, c.qk_pos_emb_head_dim, c.v_head_dim, c.kv_lora_rank
    ops = []
    if c.q_lora_rank is None:
        ops.append(Linear("q", T, a * (dq + dr), h, "column", "qkv", (("q_input", Ts * h * e),)))
    else:
        rq = c.q_lora_rank
        ops += [Linear("q_down", Ts, rq, h, "none", "qkv", (("q_down_input", Ts * h * e),)),
                Pointwise("q_norm", 2 * Ts * rq * e, 3 * Ts * rq * e, "norm", (("q_norm_input", Ts * rq * e),)),
                Linear("q_up", T, a * (dq + dr), rq, "column", "qkv", (("q_up_input", Ts * rq * e),), gathered=rq)]
    ops += [Linear("kv_down", Ts, rkv + dr, h, "none", "qkv", (("kv_down_input", Ts * h * e),)),
            Pointwise("kv_norm", 2 * Ts * rkv * e, 3 * Ts * rkv * e, "norm", (("kv_norm_input", Ts * rkv * e),)),
            Linear("kv_up", T, a * (dq + dv), rkv, "column", "qkv", (("kv_up_input", Ts * rkv * e),), gathered=rkv),
            Pointwise("rope", 2 * T * (a + 1) * dr * e, 2 * T * (a + 1) * dr * e)]
    return ops


SELECTIVE = ("softmax_logsumexp", "softmax_output", "attention_dropout_mask", "attention_dropout_output")
# What each of Megatron-Core's recompute_modules keeps from being saved (it is rerun before the backward,
# selective_recompute in programs.py): core attention's s x s tensors; the two norms' outputs (every GEMM input
# they feed); MLA's queries, keys and values from the up projections (the latents stay); the experts' activation
# output (their FC2 input).
RECOMPUTED = {"core_attn": SELECTIVE,
              "layernorm": ("qkv_input", "q_input", "q_down_input", "kv_down_input", "fc1_input", "router_input",
                            "shared_fc1_input"),
              "mla_up_proj": ("query_key_value",),
              "moe_act": ("moe_fc2_input",)}

# Saves that are another consumer's saved tensor: MLA's key/value down projection reads the input norm's output
# the query projection saved, the shared expert's FC1 the pre-MLP norm's output the router saved. In 16 bits both
# keep the one tensor (held once); under FP8 each Transformer Engine GEMM keeps its own FP8 copy of its input.
SHARED_SAVES = {"kv_down_input": ("q_down_input", "q_input"), "shared_fc1_input": ("router_input",)}


def _core_attention(shape: LayerShape) -> CoreAttention:
    """Core attention; with MLA the queries and keys have qk_head_dim + qk_pos_emb_head_dim per head and the values
    v_head_dim: head_dim is their mean, so the FLOPs (scores and x V) add up."""
    c, t, e, T = shape.model, shape.tp, shape.elem, shape.tokens
    heads, b = c.num_attention_heads // t, shape.micro_batch_size
    sq, skv = c.seq_length // shape.cp, c.seq_length
    drop = c.attention_dropout > 0
    q = c.query_projection_size // t
    if c.multi_latent_attention:
        qkv, out, head_dim = heads * (2 * (c.qk_head_dim + c.qk_pos_emb_head_dim) + c.v_head_dim), heads * \
            c.v_head_dim, (c.qk_head_dim + c.qk_pos_emb_head_dim + c.v_head_dim) / 2
    else:
        qkv, out, head_dim = q + 2 * c.kv_projection_size // t, q, c.kv_channels
    saves = (("query_key_value", T * qkv * e),)
    if shape.flash:
        saves += (("attention_output", T * out * e), ("softmax_logsumexp", T * heads * 4))
    else:
        scores = b * heads * sq * skv
        saves += (("softmax_output", scores * e),)
        saves += (("attention_dropout_mask", scores), ("attention_dropout_output", scores * e)) if drop else ()
        saves += (("attention_output", T * out * e),)
    return CoreAttention(b, heads, sq, skv, head_dim, shape.flash, drop, saves)


def saved_tensors(shape: LayerShape, recompute: str | None = None, fp8: bool = False) -> dict[str, float]:
    """Bytes one decoder layer keeps for its backward, per micro-batch, on one GPU. recompute: None, 'selective'
    (what shape.recompute_modules rerun, RECOMPUTED: by default core attention's s x s tensors, and flash keeps
    no log-sum-exp) or 'full' (only the layer's input); a tensor two operations save is counted once (SHARED_SAVES).
    fp8: the GEMMs run in FP8, and Transformer Engine keeps the FP8 copy of each one's input for its weight
    gradient (one byte an element; the router stays 16-bit)."""
    from .moe.ops import GroupedLinear  # (moe/ops.py builds on this module's operations)
    if recompute == "full":
        return {"layer_input": shape.sp_tokens * shape.model.hidden_size * shape.elem}
    dropped = {n for m in shape.recompute_modules for n in RECOMPUTED[m]} if recompute == "selective" else set()
    out: dict[str, float] = {}
    held = set()  # the 16-bit tensors kept so far (SHARED_SAVES)
    for op in decoder_layer(shape):
        cast = fp8 and isinstance(op, (Linear, GroupedLinear)) and op.group != "router"
        for name, nbytes in op.saves:
            if name in dropped or (not cast and held.intersection(SHARED_SAVES.get(name, ()))):
                continue
            held |= set() if cast else {name}
            out[name] = out.get(name, 0) + (nbytes / shape.elem if cast else nbytes)
    return out


def forward_flops_per_token(c: TransformerConfig, causal: bool = False) -> dict[str, float]:
    """Forward FLOPs of one layer per token, by GEMM group (qkv, core_attention, proj, mlp): the layer's products
    without any parallelism; core attention halved when `causal` (Megatron main's `/ 2 # causal mask`)."""
    out = {"qkv": 0.0, "core_attention": 0.0, "proj": 0.0, "mlp": 0.0}
    for op in decoder_layer(LayerShape(c, 1, 1, False, 1)):
        if isinstance(op, (Linear, CoreAttention)):
            out[op.group] = out.get(op.group, 0.0) + op.flops_per_token * (0.5 if causal and
                                                                           op.group == "core_attention" else 1.0)
    return out


__all__ = ["RECOMPUTED", "SELECTIVE", "SHARED_SAVES", "CoreAttention", "LayerShape", "Linear", "Pointwise",
           "decoder_layer", "forward_flops_per_token", "saved_tensors"]
