"""A GPT-style decoder in numpy with a hand-written backward, written once for serial and parallel training.

The model: word and learned position embeddings, `num_layers` pre-LayerNorm blocks (causal self-attention with
optional grouped-query heads, then a GELU MLP), a final LayerNorm, logits tied to the word embeddings (unless
untie_embeddings_and_output_weights), and token cross-entropy. Sizes come from TransformerConfig (Megatron names);
parameter names follow Megatron-core (decoder.layers.0.self_attention.linear_qkv.weight, ...). The fused QKV
weight is laid out by query group, [group][q heads of the group, k, v][kv_channels], as Megatron's is, so a
column split over tensor-parallel ranks hands each rank whole groups.

A `GPTChunk` is a contiguous run of layers, with the embedding if it is the first chunk and the head and loss if
it is the last: the whole model for serial training, one pipeline stage (or virtual stage) otherwise. Everything
parallel reaches it through its context (`ChunkContext`): the tensor-parallel mappings (identity on one rank;
Megatron's all-reduce / all-gather / reduce-scatter regions otherwise), the attention over the sequence (local
causal attention, or ring attention across context-parallel ranks), and the parameter store, which owns the
parameters and gradients and does the data-parallel communication.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import layers as L
from .config import ModelConfigError, TransformerConfig
from .moe.balance import routed_counts
from .moe.experts import shared_expert_backward, shared_expert_forward
from .moe.layer import (FC1, FC2, ROUTER, SHARED_FC1, SHARED_FC2, SHARED_GATE, LocalExperts, activation_kernel,
                        moe_backward, moe_forward, moe_param_shapes)
from .tensor import Meta, concat, is_meta, value
from .weight_grad import BACKWARD_INPUT, DeferredWeightGrads, is_weight_gradient_kernel


# ---- parameters ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParamSpec:
    """A parameter's full shape and how tensor parallelism splits it.

    split: None (replicated on every TP rank), "column" (last axis), "row" (the input axis: first of a matrix, second
    of an expert's stacked [E, in, out]) or "vocab" (first axis of an embedding table). sequence_parallel:
    replicated, but under sequence parallelism each TP rank computes only its share of the gradient (LayerNorms
    and row-parallel biases: Megatron all-reduces them over TP).
    """

    shape: tuple[int, ...]
    unit: str  # "embedding", "layers.i" or "head": what is gathered / reduced together
    split: str | None = None
    sequence_parallel: bool = False
    decay: bool = False  # weight decay applies (weights, not biases or norms)
    init: str = "normal"  # "normal", "scaled" (output projections), "zeros", "ones"
    expert: bool = False  # an MoE layer's experts [E, ...]: split over EP (axis 0), then column/row over ETP


def check_numeric(config: TransformerConfig) -> None:
    """The numeric model implements LayerNorm, GELU and learned absolute positions."""
    unsupported = [(config.swiglu, "swiglu"), (config.normalization != "LayerNorm", f"normalization="
                   f"{config.normalization}"), (config.position_embedding_type != "learned_absolute",
                   f"position_embedding_type={config.position_embedding_type}")]
    unsupported.append((config.multi_latent_attention, "multi_latent_attention (its decoupled RoPE needs rope)"))
    named = [name for bad, name in unsupported if bad]
    if named:
        raise ModelConfigError(f"the numeric GPT implements LayerNorm, a GELU MLP and learned absolute positions; "
                               f"{', '.join(named)} is not implemented (set swiglu=False, normalization=LayerNorm, "
                               f"position_embedding_type=learned_absolute)")


def param_specs(config: TransformerConfig) -> dict[str, ParamSpec]:
    """Every parameter of the model, in forward order."""
    check_numeric(config)
    h, f, d = config.hidden_size, config.ffn_hidden_size, config.kv_channels
    a, g = config.num_attention_heads, config.num_query_groups
    bias = config.add_bias_linear
    specs: dict[str, ParamSpec] = {
        "embedding.word_embeddings.weight": ParamSpec((config.padded_vocab_size, h), "embedding", "vocab",
                                                      decay=True),
        "embedding.position_embeddings.weight": ParamSpec((config.seq_length, h), "embedding", decay=True),
    }
    qkv = (a // g + 2) * d * g
    for i in range(config.num_layers):
        u, pre = f"layers.{i}", f"decoder.layers.{i}."
        layer = {
            "input_layernorm.weight": ParamSpec((h,), u, None, True, init="ones"),
            "input_layernorm.bias": ParamSpec((h,), u, None, True, init="zeros"),
            "self_attention.linear_qkv.weight": ParamSpec((h, qkv), u, "column", decay=True),
            "self_attention.linear_qkv.bias": ParamSpec((qkv,), u, "column", init="zeros"),
            "self_attention.linear_proj.weight": ParamSpec((a * d, h), u, "row", decay=True, init="scaled"),
            "self_attention.linear_proj.bias": ParamSpec((h,), u, None, True, init="zeros"),
            "pre_mlp_layernorm.weight": ParamSpec((h,), u, None, True, init="ones"),
            "pre_mlp_layernorm.bias": ParamSpec((h,), u, None, True, init="zeros"),
            "mlp.linear_fc1.weight": ParamSpec((h, f), u, "column", decay=True),
            "mlp.linear_fc1.bias": ParamSpec((f,), u, "column", init="zeros"),
            "mlp.linear_fc2.weight": ParamSpec((f, h), u, "row", decay=True, init="scaled"),
            "mlp.linear_fc2.bias": ParamSpec((h,), u, None, True, init="zeros"),
        }
        if config.moe_layers[i]:
            layer = {k: v for k, v in layer.items() if not k.startswith("mlp.")}
            layer.update(_moe_specs(config, u))
        specs.update({pre + k: v for k, v in layer.items() if bias or not k.endswith("linear_qkv.bias") and
                      not k.endswith("linear_proj.bias") and not k.endswith("fc1.bias") and
                      not k.endswith("fc2.bias")})
    specs["decoder.final_layernorm.weight"] = ParamSpec((h,), "head", None, True, init="ones")
    specs["decoder.final_layernorm.bias"] = ParamSpec((h,), "head", None, True, init="zeros")
    if config.untie_embeddings_and_output_weights:
        specs["output_layer.weight"] = ParamSpec((config.padded_vocab_size, h), "head", "vocab", decay=True)
    return specs


def _moe_specs(config: TransformerConfig, unit: str) -> dict[str, ParamSpec]:
    """An MoE layer's parameters under `mlp.` (Megatron-Core's names, moe/layer.py): the router (replicated; its
    gradient is summed over TP under sequence parallelism, each TP rank routing its share of the tokens), the
    experts (split over EP and ETP), the shared expert (split over TP like a dense MLP) and its gate."""
    shapes = moe_param_shapes(config.hidden_size, config)
    specs = {ROUTER: ParamSpec(shapes[ROUTER], unit, None, True, decay=True),
             FC1: ParamSpec(shapes[FC1], unit, "column", decay=True, expert=True),
             FC2: ParamSpec(shapes[FC2], unit, "row", decay=True, init="scaled", expert=True)}
    if SHARED_FC1 in shapes:
        specs[SHARED_FC1] = ParamSpec(shapes[SHARED_FC1], unit, "column", decay=True)
        specs[SHARED_FC2] = ParamSpec(shapes[SHARED_FC2], unit, "row", decay=True, init="scaled")
    if SHARED_GATE in shapes:
        specs[SHARED_GATE] = ParamSpec(shapes[SHARED_GATE], unit, None, True, decay=True)
    return {"mlp." + k: v for k, v in specs.items()}


WORD = "embedding.word_embeddings.weight"
POSITION = "embedding.position_embeddings.weight"


def init_params(config: TransformerConfig, seed: int = 0, dtype="float64", std: float = 0.02) -> dict:
    """Full (unsharded) parameters: normal(0, std) weights, std / sqrt(2 L) for output projections (GPT-2),
    zero biases, unit LayerNorm scales. The same seed gives the same model in any layout."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, spec in param_specs(config).items():
        if spec.init == "ones":
            out[name] = np.ones(spec.shape, dtype)
        elif spec.init == "zeros":
            out[name] = np.zeros(spec.shape, dtype)
        else:
            s = std / math.sqrt(2 * config.num_layers) if spec.init == "scaled" else std
            out[name] = (rng.standard_normal(spec.shape) * s).astype(dtype)
    return out


def _split_axis(spec: ParamSpec) -> int:
    """The axis tensor parallelism cuts: the last (column), the input axis (row: the second-to-last), the first
    (vocab)."""
    return {"column": len(spec.shape) - 1, "row": len(spec.shape) - 2, "vocab": 0}[spec.split]


def shard(full: np.ndarray, spec: ParamSpec, tp_size: int, tp_rank: int, ep_size: int = 1,
          ep_rank: int = 0) -> np.ndarray:
    """This rank's part of a full parameter (a copy): its TP part, or for experts (tp = ETP) its EP rank's experts'
    ETP part."""
    if spec.expert and ep_size > 1:
        full = np.split(full, ep_size, axis=0)[ep_rank]
    if spec.split is None or tp_size == 1:
        return np.array(full, copy=True)
    return np.array(np.split(full, tp_size, axis=_split_axis(spec))[tp_rank], copy=True)


def unshard(parts: list, spec: ParamSpec, ep_size: int = 1) -> np.ndarray:
    """The full parameter from every rank's part: TP parts in TP rank order; for experts, ep_size runs of ETP
    parts, one per EP rank in order."""
    if spec.expert and ep_size > 1:
        per = len(parts) // ep_size
        return np.concatenate([unshard(parts[i * per:(i + 1) * per], spec) for i in range(ep_size)], axis=0)
    if spec.split is None or len(parts) == 1:
        return parts[0]
    return np.concatenate(parts, axis=_split_axis(spec))


def local_shape(spec: ParamSpec, tp_size: int, ep_size: int = 1) -> tuple[int, ...]:
    shape = list(spec.shape)
    if spec.expert:
        if shape[0] % ep_size:
            raise ModelConfigError(f"{shape[0]} experts do not split over {ep_size} expert-parallel ranks")
        shape[0] //= ep_size
    if spec.split is not None:
        axis = _split_axis(spec)
        if shape[axis] % tp_size:
            raise ModelConfigError(f"a {spec.split}-parallel parameter of shape {spec.shape} does not split over "
                                   f"{tp_size} tensor-parallel ranks")
        shape[axis] //= tp_size
    return tuple(shape)


# ---- what a chunk needs from its surroundings --------------------------------------------------------------
class NoTensorParallel:
    """Megatron's TP mappings on one rank: every region is the identity."""

    size, rank, sequence_parallel = 1, 0, False

    def column_in(self, x):
        """Input of a column-parallel linear: (the full input, what to keep for backward)."""
        return x, x

    def column_in_recover(self, kept):
        return kept

    def column_in_backward(self, dx):
        return dx

    def row_out(self, y):
        return y

    def row_out_backward(self, dy):
        return dy

    def vocab_reduce(self, x, op: str = "sum"):
        return x

    def scatter_sequence(self, x):
        return x

    def scatter_sequence_backward(self, dx):
        return dx


class LocalAttention:
    """Causal self-attention over the rank's whole (local) sequence."""

    def __init__(self, positions, fl: L.Flops, charge=None):
        self.positions = positions
        self.fl = fl
        self.charge = charge or (lambda name, share=1.0: None)

    def forward(self, q, k, v, scale):
        o, lse = L.attention_block(q, k, v, self.positions, self.positions, scale, self.fl)
        self.charge("attention")
        return o, (q, k, v, o, lse, scale)

    def backward(self, cache, do):
        q, k, v, o, lse, scale = cache
        out = L.attention_block_backward(q, k, v, self.positions, self.positions, scale, lse, do,
                                         L.attention_delta(do, o), self.fl)
        self.charge("attention.backward")
        return out


class LocalStore:
    """Parameters and gradients held whole on this rank, no communication (serial training)."""

    def __init__(self, params: dict):
        self.params = params
        self.grads = {n: np.zeros_like(p) for n, p in params.items()}

    def param(self, name):
        return self.params[name]

    def grad(self, name):
        return self.grads[name]

    def begin(self, unit: str, phase: str) -> None:
        """Before a unit's forward or backward (a sharded store gathers its parameters here)."""

    def end(self, unit: str, phase: str) -> None:
        """After a unit's forward or backward (a sharded store frees, or reduces gradients, here)."""


@dataclass
class ChunkContext:
    """What a GPTChunk uses from the layout around it."""

    config: TransformerConfig
    store: object  # param(name), grad(name), begin(unit, phase), end(unit, phase)
    positions: np.ndarray  # global positions of this rank's tokens (its context-parallel share of the sequence)
    tp: object = field(default_factory=NoTensorParallel)
    attention: object = None  # forward(q, k, v, scale) / backward(cache, do); LocalAttention by default
    fl: L.Flops = field(default_factory=L.Flops)
    tied: bool = True  # logits use the word embeddings (or this chunk's copy of them)
    kernels: object = None  # numeric_compute.KernelCharges: the time of each kernel run (None: no clock)
    # -- MoE layers
    experts: object = None  # where routed rows meet their experts: LocalExperts, or expert_parallel's exchanges
    moe: object = None  # the settings the MoE layers route with (default: config; the z-loss scaled under TP x CP)
    reduce_counts: object = None  # sums per-expert counts over the ranks that share a micro-batch's sequence
    expert_bias: dict = field(default_factory=dict)  # MoE layer -> its expert bias (aux-loss-free balancing)
    routed: dict = field(default_factory=dict)  # MoE layer -> tokens per expert this rank routed since cleared
    routing_shares: object = None  # size-only runs: each expert's share of the routed rows (None: balanced)
    deferred: object = None  # DeferredWeightGrads during an I pass: weight-gradient kernels are charged to its W

    def __post_init__(self):
        if self.attention is None:
            self.attention = LocalAttention(self.positions, self.fl, self.charge)
        if self.experts is None:
            self.experts = LocalExperts()
        if self.moe is None:
            self.moe = self.config

    def charge_moe(self, name: str, counts=None) -> None:
        """Charge an MoE kernel: the expert GEMMs at the rows each local expert really computes."""
        if self.kernels is not None:
            self.kernels.charge_moe(name, counts)

    def charge(self, name: str, share: float = 1.0) -> None:
        """Charge the time of kernel `name` of the layer's programs (nothing without a clock)."""
        if self.deferred is not None and is_weight_gradient_kernel(name):
            self.deferred.charge(name)
        elif self.kernels is not None:
            self.kernels.charge(name, share)

    def recompute(self, position: int) -> None:
        """Charge what recomputation reruns before the backward of the chunk's layer at `position`."""
        if self.kernels is not None:
            self.kernels.recompute(position)


FORWARD, BACKWARD = "forward", "backward"


# ---- a run of layers -------------------------------------------------------------------------------------
class GPTChunk:
    """Layers `layers` of the model, with the embedding if `pre` and the final norm, logits and loss if `post`."""

    def __init__(self, layers: range, pre: bool, post: bool, ctx: ChunkContext):
        self.layers, self.pre, self.post, self.ctx = layers, pre, post, ctx
        c = ctx.config
        self.heads = c.num_attention_heads // ctx.tp.size
        self.groups = c.num_query_groups // ctx.tp.size
        if self.groups * ctx.tp.size != c.num_query_groups:
            raise ModelConfigError(f"num_query_groups {c.num_query_groups} does not split over "
                                   f"{ctx.tp.size} tensor-parallel ranks")
        self.head_dim = c.kv_channels
        self._saved: dict[object, list] = {}
        self._pending_w: dict[object, DeferredWeightGrads] = {}  # micro-batch -> what its W adds

    def param_names(self) -> dict[str, list[str]]:
        """This chunk's parameters by unit, in forward order (the head's tied word embedding included)."""
        specs = param_specs(self.ctx.config)
        units: dict[str, list[str]] = {}
        wanted = (["embedding"] if self.pre else []) + [f"layers.{i}" for i in self.layers] + \
            (["head"] if self.post else [])
        for name, spec in specs.items():
            if spec.unit in wanted:
                units.setdefault(spec.unit, []).append(name)
        if self.post and not self.ctx.config.untie_embeddings_and_output_weights and not self.pre:
            units["head"].append(WORD)  # the last stage's copy of the tied embedding (Megatron's output_layer)
        return {u: units[u] for u in wanted}

    # ---- forward / backward ------------------------------------------------------------------------------
    def forward(self, key, x=None, ids=None, targets=None, loss_scale: float = 1.0):
        """Run microbatch `key`: ids [s, b] if pre, else the input x [s', b, h]. Returns the output activations,
        or (if post) the loss: per-token cross-entropy summed and multiplied by loss_scale."""
        saved = []
        self._loss_scale = loss_scale
        if self.pre:
            x, c = self._unit(FORWARD, "embedding", self._embed, ids)
            saved.append(c)
        for i in self.layers:
            x, c = self._unit(FORWARD, f"layers.{i}", self._layer, i, x)
            saved.append(c)
        if self.post:
            x, c = self._unit(FORWARD, "head", self._head, x, targets, loss_scale)
            saved.append(c)
        self._saved[key] = saved
        return x

    def backward(self, key, dout=None):
        """Backward of microbatch `key` (dout: the output gradient; none for the last chunk). Accumulates
        parameter gradients in the store; returns the input gradient (None for the first chunk)."""
        saved = self._saved.pop(key)
        d = dout
        if self.post:
            d = self._unit(BACKWARD, "head", self._head_backward, saved.pop())
        for i in reversed(self.layers):
            self.ctx.recompute(i - self.layers.start)
            d = self._unit(BACKWARD, f"layers.{i}", self._layer_backward, i, saved.pop(), d)
        if self.pre:
            self._unit(BACKWARD, "embedding", self._embed_backward, saved.pop(), d)
            return None
        return d

    def backward_input(self, key, dout=None):
        """The backward's I pass (zero-bubble schedules): the input gradient, as backward returns it; the weight
        gradients wait for backward_weight (weight_grad.py)."""
        self.ctx.deferred = DeferredWeightGrads()
        try:
            return self.backward(key, dout)
        finally:
            self._pending_w[key], self.ctx.deferred = self.ctx.deferred, None

    def backward_weight(self, key) -> None:
        """The W pass of microbatch `key`: its weight gradients into the store."""
        self._pending_w.pop(key).apply(self.ctx.store, self.ctx.charge, BACKWARD)

    def _unit(self, phase, unit, fn, *args):
        store, deferred = self.ctx.store, self.ctx.deferred
        if deferred is not None and phase == BACKWARD:
            deferred.begin(unit)
            phase = BACKWARD_INPUT
        store.begin(unit, phase)
        if self.post and unit == "head" and self.pre and not self.ctx.config.untie_embeddings_and_output_weights:
            store.begin("embedding", phase)  # the head reads the tied word embeddings
        out = fn(*args)
        store.end(unit, phase)
        return out

    def _p(self, name):
        return self.ctx.store.param(name)

    def _g(self, name):
        deferred = self.ctx.deferred
        return self.ctx.store.grad(name) if deferred is None else deferred.grad(name, self._p(name))

    # ---- embedding ---------------------------------------------------------------------------------------
    def _embed(self, ids):
        tp = self.ctx.tp
        word_w = self._p(WORD)
        word, wc = L.embedding(ids, word_w, tp.rank * word_w.shape[0])
        self.ctx.charge("embedding")
        word = tp.vocab_reduce(word)
        pos_w = self._p(POSITION)
        pos = Meta((len(self.ctx.positions), pos_w.shape[1]), pos_w.dtype) if is_meta(pos_w) else \
            pos_w[self.ctx.positions]
        x = word + pos[:, None, :]
        self.ctx.charge("embedding_add_dropout")
        return tp.scatter_sequence(x), wc

    def _embed_backward(self, wc, d):
        d = self.ctx.tp.scatter_sequence_backward(d)
        if not is_meta(d):
            np.add.at(self._g(POSITION), self.ctx.positions, d.sum(axis=1))
        if self.ctx.deferred is None:
            L.embedding_backward(d, wc, self._g(WORD))
        else:  # a row may be added several times: in place, in W (weight_grad.py)
            self.ctx.deferred.later(lambda: L.embedding_backward(d, wc, self.ctx.store.grad(WORD)))
        self.ctx.charge("embedding.backward")

    # ---- a transformer layer -----------------------------------------------------------------------------
    def _layer(self, i, x):
        p, tp, fl = f"decoder.layers.{i}.", self.ctx.tp, self.ctx.fl
        bias = self.ctx.config.add_bias_linear
        b = (lambda n: self._p(p + n)) if bias else (lambda n: None)
        bsz, charge = x.shape[1], self.ctx.charge
        ln1, c_ln1 = L.layernorm(x, self._p(p + "input_layernorm.weight"), self._p(p + "input_layernorm.bias"))
        charge("input_norm")
        a_in, a_kept = tp.column_in(ln1)
        s = a_in.shape[0]
        qkv = L.linear(a_in, self._p(p + "self_attention.linear_qkv.weight"), b("self_attention.linear_qkv.bias"),
                       fl)
        charge("qkv")
        q, k, v = self._split_qkv(qkv, s, bsz)
        o, c_attn = self.ctx.attention.forward(q, k, v, 1.0 / math.sqrt(self.head_dim))
        o = o.reshape(s, bsz, self.heads * self.head_dim)
        proj = L.linear(o, self._p(p + "self_attention.linear_proj.weight"), None, fl)
        charge("proj")
        y = tp.row_out(proj)
        if bias:
            y = y + self._p(p + "self_attention.linear_proj.bias")
        x = x + y
        charge("attention_residual")
        ln2, c_ln2 = L.layernorm(x, self._p(p + "pre_mlp_layernorm.weight"), self._p(p + "pre_mlp_layernorm.bias"))
        charge("pre_mlp_norm")
        y2, c_mlp = (self._moe if self.ctx.config.moe_layers[i] else self._mlp)(i, ln2)
        charge("mlp_residual")
        return x + y2, (c_ln1, a_kept, c_attn, o, c_ln2, c_mlp)

    def _mlp(self, i, ln2):
        p, tp, fl, charge = f"decoder.layers.{i}.", self.ctx.tp, self.ctx.fl, self.ctx.charge
        bias = self.ctx.config.add_bias_linear
        m_in, m_kept = tp.column_in(ln2)
        h1 = L.linear(m_in, self._p(p + "mlp.linear_fc1.weight"), self._p(p + "mlp.linear_fc1.bias") if bias else None,
                      fl)
        charge("fc1")
        g, c_gelu = L.gelu(h1)
        charge("gelu")
        fc2 = L.linear(g, self._p(p + "mlp.linear_fc2.weight"), None, fl)
        charge("fc2")
        y2 = tp.row_out(fc2)
        if bias:
            y2 = y2 + self._p(p + "mlp.linear_fc2.bias")
        return y2, (m_kept, c_gelu, g)

    def _mlp_backward(self, i, saved, dx):
        p, tp, fl, charge = f"decoder.layers.{i}.", self.ctx.tp, self.ctx.fl, self.ctx.charge
        gb = (lambda n: self._g(p + n)) if self.ctx.config.add_bias_linear else (lambda n: None)
        m_kept, c_gelu, g = saved
        _bias_grad(gb("mlp.linear_fc2.bias"), dx)
        dy2 = tp.row_out_backward(dx)
        dg = L.linear_backward(g, self._p(p + "mlp.linear_fc2.weight"), dy2, self._g(p + "mlp.linear_fc2.weight"),
                               fl=fl)
        charge("fc2.dgrad"), charge("fc2.wgrad")
        dh1 = L.gelu_backward(dg, c_gelu)
        charge("gelu.backward")
        m_in = tp.column_in_recover(m_kept)
        dm_in = L.linear_backward(m_in, self._p(p + "mlp.linear_fc1.weight"), dh1,
                                  self._g(p + "mlp.linear_fc1.weight"), gb("mlp.linear_fc1.bias"), fl=fl)
        charge("fc1.dgrad"), charge("fc1.wgrad")
        return tp.column_in_backward(dm_in)

    # ---- an MoE layer's MLP (moe/layer.py; its experts where ctx.experts puts them) ------------------------------
    def _moe_params(self, i, get) -> dict:
        pre = f"decoder.layers.{i}.mlp."
        return {k: get(pre + k) for k in moe_param_shapes(self.ctx.config.hidden_size, self.ctx.config)}

    def _moe(self, i, ln2):
        ctx = self.ctx
        params = self._moe_params(i, self._p)
        routed = None
        if is_meta(ln2) and ctx.routing_shares is not None:
            routed = routed_counts(ln2.shape[0] * ln2.shape[1], ctx.config.moe_router_topk, ctx.routing_shares)
        y, saved = moe_forward(ln2, params, ctx.moe, ctx.expert_bias.get(i), ctx.fl, routed, ctx.reduce_counts,
                               ctx.experts, _TensorParallelShared(ctx, params), ctx.charge_moe)
        if i in ctx.routed:
            ctx.routed[i] = ctx.routed[i] + saved.tokens_per_expert
        # one unit of auxiliary loss weighs as one micro-batch's mean loss: its tokens times the loss scale
        weight = ln2.shape[1] * ctx.config.seq_length * self._loss_scale
        return y, (saved, weight, params)

    def _moe_backward(self, i, cache, dx):
        saved, weight, params = cache
        ctx = self.ctx
        grads = self._moe_params(i, self._g)
        return moe_backward(dx, saved, self._moe_params(i, self._p), grads, ctx.moe, ctx.fl, weight, ctx.experts,
                            _TensorParallelShared(ctx, params), ctx.charge_moe)

    def _layer_backward(self, i, saved, dx):
        p, tp, fl = f"decoder.layers.{i}.", self.ctx.tp, self.ctx.fl
        bias = self.ctx.config.add_bias_linear
        gb = (lambda n: self._g(p + n)) if bias else (lambda n: None)
        c_ln1, a_kept, c_attn, o, c_ln2, c_mlp = saved
        charge = self.ctx.charge
        # MLP
        charge("mlp_residual.backward")
        dln2 = (self._moe_backward if self.ctx.config.moe_layers[i] else self._mlp_backward)(i, c_mlp, dx)
        dx = dx + L.layernorm_backward(dln2, c_ln2, self._p(p + "pre_mlp_layernorm.weight"),
                                       self._g(p + "pre_mlp_layernorm.weight"), self._g(p + "pre_mlp_layernorm.bias"))
        charge("pre_mlp_norm.backward"), charge("attention_residual.backward")
        # attention
        if bias:
            _bias_grad(gb("self_attention.linear_proj.bias"), dx)
        dy = tp.row_out_backward(dx)
        do = L.linear_backward(o, self._p(p + "self_attention.linear_proj.weight"), dy,
                               self._g(p + "self_attention.linear_proj.weight"), fl=fl)
        charge("proj.dgrad"), charge("proj.wgrad")
        s, bsz = do.shape[0], do.shape[1]
        dq, dk, dv = self.ctx.attention.backward(c_attn, do.reshape(s, bsz, self.heads, self.head_dim))
        dqkv = self._merge_qkv(dq, dk, dv, s, bsz)
        a_in = tp.column_in_recover(a_kept)
        da_in = L.linear_backward(a_in, self._p(p + "self_attention.linear_qkv.weight"), dqkv,
                                  self._g(p + "self_attention.linear_qkv.weight"),
                                  gb("self_attention.linear_qkv.bias"), fl=fl)
        charge("qkv.dgrad"), charge("qkv.wgrad")
        dln1 = tp.column_in_backward(da_in)
        dx = dx + L.layernorm_backward(dln1, c_ln1, self._p(p + "input_layernorm.weight"),
                                       self._g(p + "input_layernorm.weight"), self._g(p + "input_layernorm.bias"))
        charge("input_norm.backward")
        return dx

    def _split_qkv(self, qkv, s, b):
        r, d, g = self.heads // self.groups, self.head_dim, self.groups
        qkv = qkv.reshape(s, b, g, r + 2, d)
        q = qkv[:, :, :, :r, :].reshape(s, b, g * r, d)
        return q, qkv[:, :, :, r, :], qkv[:, :, :, r + 1, :]

    def _merge_qkv(self, dq, dk, dv, s, b):
        r, d, g = self.heads // self.groups, self.head_dim, self.groups
        parts = [dq.reshape(s, b, g, r, d), dk.reshape(s, b, g, 1, d), dv.reshape(s, b, g, 1, d)]
        return concat(parts, axis=3).reshape(s, b, g * (r + 2) * d)

    # ---- final norm, logits, loss ------------------------------------------------------------------------
    def _output_weight(self):
        return self._p("output_layer.weight" if self.ctx.config.untie_embeddings_and_output_weights else WORD)

    def _head(self, x, targets, loss_scale):
        tp, fl, charge = self.ctx.tp, self.ctx.fl, self.ctx.charge
        ln, c_ln = L.layernorm(x, self._p("decoder.final_layernorm.weight"), self._p("decoder.final_layernorm.bias"))
        charge("final_norm")
        h_in, h_kept = tp.column_in(ln)
        w = self._output_weight()
        logits = L.linear(h_in, w.T, None, fl)  # [s, b, V / tp]
        charge("output")
        steps = iter(("cross_entropy.max", "cross_entropy.target", "cross_entropy.sum_exp"))  # the order it reduces

        def reduce(x, op="sum"):
            charge(next(steps))
            return tp.vocab_reduce(x, op)
        losses, c_ce = L.vocab_parallel_cross_entropy(logits, targets, tp.rank * w.shape[0], reduce)
        loss = losses if is_meta(losses) else losses.sum() * loss_scale
        return loss, (c_ln, h_kept, c_ce, loss_scale, logits)

    def _head_backward(self, saved):
        tp, fl, charge = self.ctx.tp, self.ctx.fl, self.ctx.charge
        c_ln, h_kept, c_ce, loss_scale, logits = saved
        w = self._output_weight()
        dw = self._g("output_layer.weight" if self.ctx.config.untie_embeddings_and_output_weights else WORD)
        if c_ce is None:
            dlogits = logits
        else:
            dlogits = L.vocab_parallel_cross_entropy_backward(np.full(logits.shape[:-1], loss_scale,
                                                                      logits.dtype), c_ce)
        charge("cross_entropy.backward")
        h_in = tp.column_in_recover(h_kept)
        # logits = h_in @ w.T: dh_in = dlogits @ w; dw += dlogits^T h_in
        fl.gemm(math.prod(h_in.shape[:-1]), w.shape[1], w.shape[0], times=2)
        if is_meta(h_in, dlogits):
            dh_in = Meta(h_in.shape, h_in.dtype)
        else:
            dl2 = dlogits.reshape(-1, w.shape[0])
            dw += dl2.T @ h_in.reshape(-1, w.shape[1])
            dh_in = dlogits @ w
        charge("output.dgrad"), charge("output.wgrad")
        dln = tp.column_in_backward(dh_in)
        dx = L.layernorm_backward(dln, c_ln, self._p("decoder.final_layernorm.weight"),
                                  self._g("decoder.final_layernorm.weight"), self._g("decoder.final_layernorm.bias"))
        charge("final_norm.backward")
        return dx


class _TensorParallelShared:
    """An MoE layer's shared expert under tensor parallelism, as a dense MLP: its input gathered along the sequence
    (SP) before the column-parallel FC1, its output reduced (reduce-scattered) after the row-parallel FC2; the
    input kept split and gathered again for the backward, as Megatron does. The identity mappings on one rank."""

    def __init__(self, ctx: ChunkContext, params: dict):
        self.tp, self.moe, self.fl, self.charge, self.p = ctx.tp, ctx.config, ctx.fl, ctx.charge_moe, params

    def forward(self, x2):
        p = self.p
        m_in, kept = self.tp.column_in(x2)
        y, (c, gated) = shared_expert_forward(m_in, p[SHARED_FC1], p[SHARED_FC2], self.moe.swiglu, p.get(SHARED_GATE),
                                              self.fl)
        for name in ("shared_expert.fc1", activation_kernel("shared_expert", self.moe), "shared_expert.fc2") + \
                (("shared_expert.gate",) if gated else ()):
            self.charge(name)
        # the gathered input is not kept (gathered again in the backward)
        c = (None,) + c[1:]
        gated = None if gated is None else (None,) + gated[1:]
        return self.tp.row_out(y), (c, gated, kept)

    def backward(self, dy2, cache, grads):
        c, gated, kept = cache
        p = self.p
        dy = self.tp.row_out_backward(dy2)
        m_in = self.tp.column_in_recover(kept)
        c = (m_in,) + c[1:]
        gated = None if gated is None else (m_in,) + gated[1:]
        dm_in = shared_expert_backward(dy, (c, gated), p[SHARED_FC1], p[SHARED_FC2], grads[SHARED_FC1],
                                       grads[SHARED_FC2], self.moe.swiglu, p.get(SHARED_GATE), grads.get(SHARED_GATE),
                                       self.fl)
        for name in ("shared_expert.fc2.dgrad", "shared_expert.fc2.wgrad",
                     activation_kernel("shared_expert", self.moe) + ".backward",
                     "shared_expert.fc1.dgrad", "shared_expert.fc1.wgrad") + \
                (("shared_expert.gate.dgrad", "shared_expert.gate.wgrad") if gated else ()):
            self.charge(name)
        return self.tp.column_in_backward(dm_in)


def _bias_grad(db, dy) -> None:
    if db is not None and not is_meta(dy):
        db += dy.sum(axis=tuple(range(dy.ndim - 1)))


def loss_value(loss) -> float | None:
    return value(loss)
