"""Programs: the kernels and tensor/context-parallel communication of one transformer layer (and of the embedding
and the output layer), one micro-batch, one GPU, derived from the layer's one description (layer.py).

A program is a list of LayerSteps. A step's compute kernels run back to back on the GPU's compute stream while its
communication runs beside them (each axis in order on its own stream); the step ends when both are done. So a
step with compute and communication is overlap, and a step with only communication is exposed communication.

What Megatron-LM (Transformer Engine layers) does, per layer (T tokens per GPU = b s / cp; with sequence
parallelism the norms, dropouts and residual adds run on T / t tokens):
- forward: norm, [SP all-gather | -], QKV GEMM, RoPE, core attention (flash, or scores/softmax/dropout/x V
  GEMMs), [CP ring exchange of K,V beside it], output projection GEMM, [SP reduce-scatter | all-reduce], dropout +
  residual add, norm, [all-gather], FC1 GEMM, GELU or SwiGLU, FC2 GEMM, [reduce-scatter | all-reduce], residual add.
  With tp_comm_overlap the all-gathers and reduce-scatters overlap the GEMMs they feed or follow (TE userbuffers).
- backward: every GEMM twice (dgrad: dY W^T; wgrad: X^T dY); column-parallel layers (QKV, FC1) re-gather their
  sharded input beside the dgrad GEMM and reduce-scatter (or all-reduce, without SP) the input gradient beside the
  wgrad GEMM, as Megatron's async linear layers do by default; row-parallel layers (projection, FC2) first gather
  the sequence-sharded output gradient (SP only; exposed unless tp_comm_overlap). Flash attention's backward
  recomputes the scores (2.5x the forward's FLOPs); with CP the ring carries K,V again and dK,dV back.
- FLOPs are recorded in the formula convention (core attention over the full s x s matrix) so they add up to
  Megatron's num_floating_point_operations; kernel times use the work the causal kernel really does (half).
"""
from __future__ import annotations

from dataclasses import dataclass

from .layer import CoreAttention, LayerShape, Linear, Pointwise, decoder_layer
from .moe.ops import GroupedLinear, TokenExchange

GEMM, GROUPED_GEMM, ATTENTION, MEMORY = "gemm", "grouped_gemm", "attention", "memory"


@dataclass(frozen=True)
class Kernel:
    """One kernel: a GEMM (shape = (M, N, K)), a grouped GEMM (shape = (rows per expert, N, K, wgrad)), flash
    attention (shape = (batch x heads, queries, real FLOPs, 'forward' | 'backward')) or a memory-bound op
    (shape = (bytes, op class))."""

    name: str
    kind: str
    shape: tuple
    flops: float = 0.0  # formula FLOPs on this GPU (0 for memory-bound ops)


@dataclass(frozen=True)
class LayerComm:
    """Communication beside the compute: a collective over the GPU's TP, EP or ETP group (nbytes = nccl-tests' S),
    or `steps` ring sends of nbytes each to the next CP rank. An EP all-to-all sends per_peer[j] bytes from every
    rank to EP rank j (`back`: the transposed exchange, rank j returning them); DeepEP's ("deepep", the flex
    dispatcher) is timed as moe/deepep.py says."""

    name: str
    axis: str  # "tp", "cp", "ep" or "etp"
    collective: str  # all_gather | reduce_scatter | all_reduce | all_to_all | ring
    nbytes: float
    steps: int = 1
    per_peer: tuple[float, ...] = ()
    back: bool = False
    deepep: object = None  # the flex dispatcher's exchange (moe/deepep.py); per_peer then counts rows


@dataclass(frozen=True)
class LayerStep:
    compute: tuple[Kernel, ...] = ()
    comm: tuple[LayerComm, ...] = ()


def _mem(name: str, nbytes: float, cls: str = "elementwise") -> Kernel:
    return Kernel(name, MEMORY, (float(nbytes), cls))


def _gemm(name: str, m: int, n: int, k: int) -> Kernel:
    return Kernel(name, GEMM, (m, n, k), 2.0 * m * n * k)


class _Builder:
    def __init__(self, shape: LayerShape):
        self.s = shape
        self.steps: list[LayerStep] = []

    def compute(self, *kernels: Kernel) -> None:
        if self.steps and not self.steps[-1].comm:  # merge into the previous compute-only step
            self.steps[-1] = LayerStep(self.steps[-1].compute + kernels)
        else:
            self.steps.append(LayerStep(kernels))

    def beside(self, kernels: tuple[Kernel, ...], *comm: LayerComm) -> None:
        self.steps.append(LayerStep(tuple(kernels), tuple(c for c in comm if c is not None)))

    def exposed(self, *comm: LayerComm) -> None:
        self.steps.append(LayerStep((), tuple(c for c in comm if c is not None)))


def _tp(shape: LayerShape, name: str, collective: str, tokens: int, width: int) -> LayerComm | None:
    """A TP collective on a [tokens, width] activation (None at t = 1). S is the whole buffer for all_gather and
    reduce_scatter, each rank's buffer for all_reduce (nccl-tests)."""
    if shape.tp == 1:
        return None
    return LayerComm(name, "tp", collective, float(tokens * width * shape.elem))


def _gather(shape: LayerShape, name: str, width: int = 0):
    """The SP all-gather of the [T, width] activation (width: h unless given) before a column-parallel GEMM."""
    return _tp(shape, name, "all_gather", shape.tokens, width or shape.model.hidden_size) if shape.sp else None


def _reduce(shape: LayerShape, name: str):
    """After a row-parallel GEMM: reduce-scatter with SP, all-reduce without."""
    return _tp(shape, name, "reduce_scatter" if shape.sp else "all_reduce", shape.tokens, shape.model.hidden_size)


def _column_forward(b: _Builder, name: str, gemm: Kernel, width: int = 0) -> None:
    ag = _gather(b.s, f"{name}.all_gather", width)
    if ag is not None and b.s.tp_comm_overlap:
        b.beside((gemm,), ag)
    else:
        if ag is not None:
            b.exposed(ag)
        b.compute(gemm)


def _row_forward(b: _Builder, name: str, gemm: Kernel) -> None:
    red = _reduce(b.s, f"{name}.{'reduce_scatter' if b.s.sp else 'all_reduce'}")
    if red is not None and b.s.tp_comm_overlap:
        b.beside((gemm,), red)
    else:
        b.compute(gemm)
        if red is not None:
            b.exposed(red)


def _column_backward(b: _Builder, name: str, m: int, n: int, k: int, after_dgrad=(), part: str = "all",
                     width: int = 0) -> None:
    """Column-parallel Y = X W (X: [m, k], W: [k, n]): dgrad beside the input's re-gather (SP), wgrad beside the
    input gradient's reduce-scatter (SP) or all-reduce. part: all, input (the reduction exposed: no wgrad to hide
    it) or weight (the wgrad alone; the gathered input kept from the input pass)."""
    dgrad, wgrad = _gemm(f"{name}.dgrad", m, k, n), _gemm(f"{name}.wgrad", k, n, m)
    reduce = _reduce(b.s, f"{name}.grad_{'reduce_scatter' if b.s.sp else 'all_reduce'}")
    if part == "weight":
        b.compute(wgrad)
        return
    b.beside((dgrad,) + tuple(after_dgrad), _gather(b.s, f"{name}.input_all_gather", width))
    if part == "all":
        b.beside((wgrad,), reduce)
    elif reduce is not None:
        b.exposed(reduce)


def _row_backward(b: _Builder, name: str, m: int, n: int, k: int, part: str = "all") -> None:
    """Row-parallel Y = X W (X: [m, k] split on k): with SP the output gradient is gathered first."""
    dgrad, wgrad = _gemm(f"{name}.dgrad", m, k, n), _gemm(f"{name}.wgrad", k, n, m)
    if part == "weight":
        b.compute(wgrad)
        return
    ag = _gather(b.s, f"{name}.grad_all_gather")
    weight = (wgrad,) if part == "all" else ()
    if ag is not None and b.s.tp_comm_overlap:
        b.beside((dgrad,), ag)
        b.compute(*weight)
    else:
        if ag is not None:
            b.exposed(ag)
        b.compute(dgrad, *weight)


def attention_kernels(shape: LayerShape, att: CoreAttention, backward: bool) -> tuple[Kernel, ...]:
    formula, bh, sq, skv, d = att.flops, att.batch_heads, att.sq, att.skv, att.head_dim
    if att.flash:
        real = formula / 2  # the causal kernel skips the masked half
        if backward:
            return (Kernel("core_attention.backward", ATTENTION, (bh, sq, 2.5 * real, "backward"), 2 * formula),)
        return (Kernel("core_attention", ATTENTION, (bh, sq, real, "forward"), formula),)
    scores = bh * sq * skv * shape.elem
    # Megatron's fused scale-mask-softmax kernel takes 16-bit scores; fp32 masks in a pass of its own (torch)
    mask = (_mem("attention_mask", 2 * scores),) if shape.elem == 4 else ()
    fwd = (Kernel("scores", GEMM, (bh * sq, skv, d), 2.0 * bh * sq * skv * d), *mask,
           _mem("softmax", 2 * scores, "softmax"))
    fwd += (_mem("attention_dropout", 2 * scores + scores / 2),) if att.dropout else ()
    fwd += (Kernel("attention_x_v", GEMM, (bh * sq, d, skv), 2.0 * bh * sq * skv * d),)
    if not backward:
        return fwd
    out = (Kernel("attention_x_v.backward", GEMM, (bh * sq, skv, 2 * d), 4.0 * bh * sq * skv * d),)
    out += (_mem("attention_dropout.backward", 2.5 * scores),) if att.dropout else ()
    out += (_mem("softmax.backward", 3 * scores, "softmax"),)
    out += (_mem("attention_mask.backward", 2 * scores),) if mask else ()
    return out + (Kernel("scores.backward", GEMM, (bh * sq, 2 * d, skv), 4.0 * bh * sq * skv * d),)


def _attention(b: _Builder, att: CoreAttention, backward: bool) -> None:
    """Core attention's kernels, the CP ring's K,V exchange beside them."""
    kernels = attention_kernels(b.s, att, backward)
    ring = _cp_ring(b.s, backward)
    b.beside(kernels, ring) if ring is not None else b.compute(*kernels)


def _cp_ring(shape: LayerShape, backward: bool) -> LayerComm | None:
    """Ring attention: cp - 1 steps, each passing this GPU's K,V chunk on (and dK,dV back in the backward)."""
    if shape.cp == 1:
        return None
    c = shape.model
    kv = shape.tokens * 2 * c.kv_projection_size // shape.tp * shape.elem
    return LayerComm("context_parallel.kv_ring" + (".backward" if backward else ""), "cp", "ring",
                float(kv * (2 if backward else 1)), shape.cp - 1)


def _grouped(name: str, counts: tuple, n: int, k: int, grouped: bool, wgrad: bool = False) -> tuple[Kernel, ...]:
    """Each expert's rows [counts[i], k] @ [k, n] (wgrad: [k, counts[i]] @ [counts[i], n]): one grouped GEMM, or one
    GEMM per expert that has rows."""
    flops = 2.0 * sum(counts) * n * k
    if grouped:
        return (Kernel(name, GROUPED_GEMM, (tuple(counts), n, k, wgrad), flops),)
    return tuple(Kernel(f"{name}[{i}]", GEMM, (k, n, m) if wgrad else (m, n, k), 2.0 * m * n * k)
                 for i, m in enumerate(counts) if m)


def _exchange(op: TokenExchange, backward: bool) -> LayerComm:
    """An MoE exchange; in the backward the adjoint: all-to-all the other way, reduce-scatter for all-gather."""
    name = op.name + (".backward" if backward else "")
    if op.collective in ("all_to_all", "deepep"):
        return LayerComm(name, op.axis, op.collective, op.nbytes, per_peer=op.per_peer, back=op.back != backward,
                         deepep=op.deepep)
    adjoint = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather"}[op.collective]
    return LayerComm(name, op.axis, adjoint if backward else op.collective, op.nbytes)


def _linear_forward(b: _Builder, op: Linear) -> None:
    gemm = _gemm(op.name, op.m, op.n, op.k)
    if op.parallel == "column":
        _column_forward(b, op.name, gemm, op.gathered)
    elif op.parallel == "row":
        _row_forward(b, op.name, gemm)
    else:  # replicated: on this GPU's own tokens, no TP communication
        b.compute(gemm)


def _linear_backward(b: _Builder, op: Linear, part: str = "all") -> None:
    if op.parallel == "column":
        _column_backward(b, op.name, op.m, op.n, op.k, part=part, width=op.gathered)
    elif op.parallel == "row":
        _row_backward(b, op.name, op.m, op.n, op.k, part=part)
    else:  # replicated: dgrad in the input pass, wgrad in the weight pass
        dgrad = (_gemm(f"{op.name}.dgrad", op.m, op.k, op.n),) if part != "weight" else ()
        wgrad = (_gemm(f"{op.name}.wgrad", op.k, op.n, op.m),) if part != "input" else ()
        b.compute(*dgrad, *wgrad)


def _counts_gather(shape: LayerShape) -> LayerComm:
    """Megatron's dispatcher first all-gathers every EP rank's tokens per expert (int64) to size the all-to-all."""
    return LayerComm("moe.tokens_per_expert.all_gather", "ep", "all_gather",
                     float(shape.ep * shape.model.num_moe_experts * 8))


def _shared_beside(shape: LayerShape, ops) -> dict:
    """moe_shared_expert_overlap (Megatron-Core's SharedExpertMLP): the shared expert's FC1 and activation run
    beside the dispatch, its FC2 (and gate) beside the combine, each on its own stream; under TP its input is
    gathered before the dispatch and its output reduced after the combine. {exchange name: (kernels, TP
    communication before, after)}; empty without the overlap (or without a shared expert or EP)."""
    shared = [op for op in ops if op.name.startswith("shared_expert.")]
    if not (shape.shared_expert_overlap and shared and shape.ep > 1):
        return {}
    kernels = [_mem(op.name, op.forward_bytes, op.op_class) if isinstance(op, Pointwise) else
               _gemm(op.name, op.m, op.n, op.k) for op in shared]
    fc2 = next(i for i, op in enumerate(shared) if op.name == "shared_expert.fc2")
    gather = _gather(shape, "shared_expert.fc1.all_gather")
    reduce = _reduce(shape, f"shared_expert.fc2.{'reduce_scatter' if shape.sp else 'all_reduce'}")
    return {"moe.dispatch": (tuple(kernels[:fc2]), gather, None),
            "moe.combine": (tuple(kernels[fc2:]), None, reduce)}


def layer_forward(shape: LayerShape) -> list[LayerStep]:
    """One decoder layer's forward: its operations in order, each product with its TP communication."""
    b = _Builder(shape)
    ops = decoder_layer(shape)
    beside = _shared_beside(shape, ops)
    for op in ops:
        if beside and op.name.startswith("shared_expert."):
            continue  # run beside the exchanges
        if isinstance(op, Pointwise):
            b.compute(_mem(op.name, op.forward_bytes, op.op_class))
        elif isinstance(op, Linear):
            _linear_forward(b, op)
        elif isinstance(op, GroupedLinear):
            b.compute(*_grouped(op.name, op.counts, op.n, op.k, op.grouped))
        elif isinstance(op, TokenExchange) and op.name in beside:
            kernels, before, after = beside[op.name]
            if before is not None:
                b.exposed(before)
            comm = (_counts_gather(shape),) if op.axis == "ep" and not op.back else ()
            b.beside(kernels, *comm, _exchange(op, backward=False))
            if after is not None:
                b.exposed(after)
        elif isinstance(op, TokenExchange):
            if op.axis == "ep" and not op.back:
                b.exposed(_counts_gather(shape))
            b.exposed(_exchange(op, backward=False))
        else:
            _attention(b, op, backward=False)
    return b.steps


def layer_backward(shape: LayerShape, part: str = "all") -> list[LayerStep]:
    """One decoder layer's backward (without any recomputation): its operations in reverse. part: all, input
    (zero-bubble's I: everything but the weight-gradient GEMMs) or weight (W: those GEMMs)."""
    b = _Builder(shape)
    for op in reversed(decoder_layer(shape)):
        if isinstance(op, Linear):
            _linear_backward(b, op, part)
        elif isinstance(op, GroupedLinear):
            dgrad = _grouped(f"{op.name}.dgrad", op.counts, op.k, op.n, op.grouped) if part != "weight" else ()
            wgrad = _grouped(f"{op.name}.wgrad", op.counts, op.n, op.k, op.grouped, wgrad=True) \
                if part != "input" else ()
            b.compute(*dgrad, *wgrad)
        elif part == "weight":
            continue
        elif isinstance(op, Pointwise):
            b.compute(_mem(op.name + ".backward", op.backward_bytes, op.op_class))
        elif isinstance(op, TokenExchange):
            b.exposed(_exchange(op, backward=True))
        else:
            _attention(b, op, backward=True)
    return b.steps


RERUN = {"layernorm": ("input_norm", "pre_mlp_norm"), "mla_up_proj": ("q_up", "kv_up", "rope"),
         "moe_act": ("moe.swiglu", "moe.gelu")}  # the operations of each recompute module (layer.RECOMPUTED)


def selective_recompute(shape: LayerShape) -> list[LayerStep]:
    """What selective recomputation reruns before a layer's backward, in forward order: the forwards of the
    recompute_modules' operations (core_attn: core attention, with its CP ring; layernorm: the two norms;
    mla_up_proj: MLA's up projections, with their SP gathers, and RoPE; moe_act: the experts' activation)."""
    b = _Builder(shape)
    names = {n for m in shape.recompute_modules for n in RERUN.get(m, ())}
    mla = shape.model.multi_latent_attention
    for op in decoder_layer(shape):
        if isinstance(op, CoreAttention):
            if "core_attn" in shape.recompute_modules:
                _attention(b, op, backward=False)
        elif op.name not in names or op.name == "rope" and not mla:
            continue
        elif isinstance(op, Pointwise):
            b.compute(_mem(op.name, op.forward_bytes, op.op_class))
        else:
            _linear_forward(b, op)
    return b.steps


def embedding_forward(shape: LayerShape) -> list[LayerStep]:
    """Vocab-parallel embedding lookup; its partial sums are all-reduced (reduce-scattered with SP) over TP."""
    c, T, h, e = shape.model, shape.tokens, shape.model.hidden_size, shape.elem
    b = _Builder(shape)
    b.compute(_mem("embedding", 2 * T * h * e))
    red = _reduce(shape, "embedding." + ("reduce_scatter" if shape.sp else "all_reduce"))
    if red is not None:
        b.exposed(red)
    if c.position_embedding_type == "learned_absolute" or c.hidden_dropout > 0:
        b.compute(_mem("embedding_add_dropout", 3 * shape.sp_tokens * h * e))
    return b.steps


def embedding_backward(shape: LayerShape, part: str = "all") -> list[LayerStep]:
    """The embedding's backward is its weight gradient (a scatter-add): nothing in an input pass."""
    T, h, e = shape.tokens, shape.model.hidden_size, shape.elem
    b = _Builder(shape)
    if part == "input":
        return b.steps
    ag = _gather(shape, "embedding.grad_all_gather")
    if ag is not None:
        b.exposed(ag)
    b.compute(_mem("embedding.backward", 3 * T * h * e))
    return b.steps


def _loss_allreduce(shape: LayerShape, name: str) -> LayerComm | None:
    return _tp(shape, name, "all_reduce", shape.tokens, 1) if shape.tp > 1 else None


def output_forward(shape: LayerShape) -> list[LayerStep]:
    """Final norm, the vocab-parallel output layer and cross-entropy (three small all-reduces over TP: max, sum
    of exponentials, target logit; fp32 logits)."""
    c, T, h, e = shape.model, shape.tokens, shape.model.hidden_size, shape.elem
    v = c.padded_vocab_size // shape.tp
    b = _Builder(shape)
    b.compute(_mem("final_norm", 2 * shape.sp_tokens * h * e, "norm"))
    _column_forward(b, "output", _gemm("output", T, v, h))
    for what, traffic in (("max", 2 * T * v * 4), ("sum_exp", 2 * T * v * 4), ("target", T * v * 4)):
        b.compute(_mem(f"cross_entropy.{what}", traffic, "softmax"))
        ar = _loss_allreduce(shape, f"cross_entropy.{what}_all_reduce")
        if ar is not None:
            b.exposed(LayerComm(ar.name, "tp", "all_reduce", float(T * 4)))
    return b.steps


def output_backward(shape: LayerShape, part: str = "all") -> list[LayerStep]:
    c, T, h, e = shape.model, shape.tokens, shape.model.hidden_size, shape.elem
    v = c.padded_vocab_size // shape.tp
    b = _Builder(shape)
    if part == "weight":
        _column_backward(b, "output", T, v, h, part=part)
        return b.steps
    b.compute(_mem("cross_entropy.backward", T * v * (4 + 4 + e), "softmax"))
    _column_backward(b, "output", T, v, h, part=part)
    b.compute(_mem("final_norm.backward", 3 * shape.sp_tokens * h * e, "norm"))
    return b.steps


def program_flops(steps: list[LayerStep]) -> float:
    """Formula FLOPs of a program on one GPU."""
    return sum(k.flops for st in steps for k in st.compute)
