"""Device memory of a training layout: model state by ZeRO stage, activations per layer by listing the tensors each
layer saves for its backward, the pipeline schedule's peak, and a clear out-of-memory error.

Model state (bytes per parameter; shared/reference/training-cost-model.md section 4): P (parameters) + G
(gradient buffer) + O (optimizer: fp32 master copy unless the parameters are fp32, Adam's two moments, and an fp32
gradient copy when gradients are 16-bit and `fp32_grad_copy`). ZeRO-1 shards O, ZeRO-2 also G, ZeRO-3 also P over
the data-parallel ranks (widened by context parallelism, as Megatron-LM's distributed optimizer does). This gives
ZeRO's 16 / 4+12/N / 2+14/N / 16/N (fp16 P and G, no grad copy) and Megatron-LM's 18 -> 6+12/d (bf16 with fp32
gradients), 20 -> 4+16/d (fp16) and 16 -> 8+8/d (fp32).

Activations: `saved_tensors` (from the layer's one description, layer.py) lists what one layer keeps per
micro-batch on one GPU; for a GPT block with dropout and a materialised attention matrix it reproduces Korthikanti
et al. 2022 Table 2 (sbh(34 + 5as/h) and its TP, SP and selective-recompute forms). Flash attention keeps the
output and the log-sum-exp instead of s x s matrices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ...errors import OutOfMemoryError
from ...units import format_size
from ..data_parallel.gathering import gathering, pass_uses
from ..data_parallel.sharding import sharding
from ..pipeline_parallel.timeline import held_at_peaks
from .flops import embedding_params
from .layer import LayerShape, saved_tensors


# ---- model state -----------------------------------------------------------------------------------------------
def optimizer_bytes(param_bytes: int, grad_bytes: int, fp32_grad_copy: bool = True) -> int:
    """Adam's state per parameter: fp32 master weights (unless the parameters are fp32), two fp32 moments, and an
    fp32 copy of 16-bit gradients when `fp32_grad_copy` (Megatron-LM's fp16 path)."""
    return (4 if param_bytes < 4 else 0) + 8 + (4 if fp32_grad_copy and grad_bytes < 4 else 0)


def bytes_per_parameter(param_bytes: int, grad_bytes: int, zero_stage: int, shards: int,
                        fp32_grad_copy: bool = True) -> dict[str, float]:
    """{weights, gradients, optimizer_state} bytes per parameter under ZeRO stage 0-3 over `shards` ranks (what
    data_parallel/sharding.py says each stage shards)."""
    p, g, o = float(param_bytes), float(grad_bytes), float(optimizer_bytes(param_bytes, grad_bytes, fp32_grad_copy))
    scheme = sharding(zero_stage)
    if scheme.optimizer_state:
        o /= shards
    if scheme.gradients:
        g /= shards
    if scheme.weights:
        p /= shards
    return {"weights": p, "gradients": g, "optimizer_state": o}


_PARAMETERS: dict = {}


def stage_parameters(layout, rank: int) -> dict[str, float]:
    """Parameters one GPU of pipeline rank `rank` holds: decoder layers (TP-split matrices, replicated norms), an
    MoE model's routed experts apart, the embedding on the first rank, the output layer on the last (tied weights:
    a copy when pp > 1). Cached by what they depend on: a layout search asks for thousands of layouts that differ
    only in their batch, schedule, ZeRO stage or recomputation."""
    dims = layout.dims
    key = (layout.model, dims.tp, dims.ep, dims.etp, dims.pp, rank, layout.stage_layers[rank])
    return dict(_memo(_PARAMETERS, key, lambda: _stage_parameters(layout, rank)))


def _memo(cache: dict, key, make):
    """cache[key], made by make() where missing; a cache emptied once it holds 4096 (a layout search asks for
    thousands of layouts)."""
    got = cache.get(key)
    if got is None:
        if len(cache) >= 4096:
            cache.clear()
        got = cache[key] = make()
    return got


def _stage_parameters(layout, rank: int) -> dict[str, float]:
    c, tp = layout.model, layout.dims.tp
    layers = [i for ch in range(layout.chunks) for i in layout.layers_of(rank, ch)]
    experts = sum(layout.expert_params_of(i) for i in layers)
    out = {"layers": sum(layout.params_of(i) for i in layers) - experts, "embedding": 0.0, "output": 0.0}
    if c.is_moe:
        out["experts"] = experts  # the routed experts: sharded over EP x ETP, reduced over expert data parallel
    table = c.padded_vocab_size * c.hidden_size / tp
    if rank == 0:
        out["embedding"] = table + (embedding_params(c) - c.padded_vocab_size * c.hidden_size)
    if rank == layout.dims.pp - 1:
        untied_or_copy = c.untie_embeddings_and_output_weights or layout.dims.pp > 1
        norm = c.hidden_size * (2 if c.normalization == "LayerNorm" else 1)
        out["output"] = norm + (table if untied_or_copy else 0.0)
    return out


# ---- activations -----------------------------------------------------------------------------------------------
@lru_cache(maxsize=4096)
def layer_activation_bytes(shape: LayerShape, recompute: str | None = None, fp8: bool = False) -> float:
    return float(sum(saved_tensors(shape, recompute, fp8).values()))


def korthikanti_bytes_per_layer(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
                                selective: bool = False) -> float:
    """Korthikanti et al. 2022 Table 2 (GPT block, dropout, 16-bit activations, attention matrix stored)."""
    attn = 0.0 if selective else 5 * a * s / (h * t)
    return s * b * h * ((34 / t if sp else 10 + 24 / t) + attn)


# ---- the pipeline's peak ---------------------------------------------------------------------------------------
@dataclass
class StageMemory:
    """One GPU of one pipeline stage at its peak: bytes by category, the peak, and what was in flight."""

    rank: int  # pipeline rank
    gpu: int  # global rank of the first GPU of the stage (data-parallel replica 0)
    categories: dict[str, float]
    capacity: float
    in_flight: int  # micro-batch-chunks whose activations were held at the peak
    parameters: float
    details: dict = field(default_factory=dict)

    @property
    def peak(self) -> float:
        return float(sum(self.categories.values()))

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity

    def as_dict(self) -> dict:
        return {"stage": self.rank, "gpu": self.gpu, "peak": self.peak, "capacity": self.capacity,
                "fits": self.fits, "in_flight": self.in_flight, "parameters": self.parameters,
                "categories": dict(self.categories), **self.details}


_ACTIVATIONS: dict = {}


def _chunk_activations(layout, shape: LayerShape, rank: int, chunk: int) -> float:
    """Bytes one micro-batch leaves on this GPU after the forward of model chunk `chunk` (cached by what they depend
    on, as stage_parameters)."""
    cfg = layout.config
    key = (shape, layout.moe_layer_shape, cfg.recompute_granularity, cfg.recompute_method, cfg.recompute_num_layers,
           cfg.fp8_format is not None, layout.moe_pattern(rank, chunk), layout.has_embedding(rank, chunk),
           layout.has_output(rank, chunk))
    return _memo(_ACTIVATIONS, key, lambda: _activations(layout, shape, rank, chunk))


def _activations(layout, shape: LayerShape, rank: int, chunk: int) -> float:
    cfg, c = layout.config, layout.model
    layers = layout.layers_of(rank, chunk)
    fp8 = cfg.fp8_format is not None
    kept = layer_activation_bytes(shape, "full") if cfg.recompute_granularity == "full" else 0.0
    total = 0.0
    for i, layer in enumerate(layers):
        full = layer_activation_bytes(layout.shape_of(layer), cfg.recompute_granularity
                                      if cfg.recompute_granularity != "full" else None, fp8)
        if cfg.recompute_granularity == "full":
            n = cfg.recompute_num_layers or 1
            if cfg.recompute_method == "block":
                total += kept if i < n else full
            else:
                total += kept / n
        else:
            total += full
    e, h = shape.elem, c.hidden_size
    if layout.has_embedding(rank, chunk) and c.hidden_dropout > 0:
        total += shape.sp_tokens * h  # embedding dropout mask
    if layout.has_output(rank, chunk):
        total += 2 * shape.sp_tokens * h * e + shape.tokens * c.padded_vocab_size / shape.tp * 4  # norm, fp32 softmax
    return total


def _transient(layout, shape: LayerShape, rank: int) -> dict[str, float]:
    """Short-lived buffers at the peak: a recomputed group's full activations, the logits, ZeRO-3 gathers."""
    cfg, c = layout.config, layout.model
    out = {}
    if cfg.recompute_granularity == "full":
        out["recompute_working_set"] = recompute_working_set(layout, rank)
    if rank == layout.dims.pp - 1:
        out["logits"] = shape.tokens * c.padded_vocab_size / shape.tp * (shape.elem + 4)
    if layout.sharding.weights:
        out["zero3_gathered_parameters"] = zero3_gathered_parameters(layout, rank) * cfg.param_bytes
        if not gathering(cfg).sync_each_microbatch:  # torchtitan under PP: gradients kept whole until the last
            out["zero3_unsharded_gradients"] = sum(stage_parameters(layout, rank).values()) * cfg.param_bytes
    return out


def recompute_working_set(layout, rank: int) -> float:
    """Full recomputation reruns one group of layers' forward (recompute_num_layers of them under the uniform
    method, one under block) right before its backward: the largest group's saved tensors, each layer its own
    shape (an MoE layer's routed rows, a dense layer's MLP)."""
    cfg = layout.config
    n = 1 if cfg.recompute_method == "block" else (cfg.recompute_num_layers or 1)
    fp8 = cfg.fp8_format is not None
    key = (layout.layer_shape, layout.moe_layer_shape, n, fp8,
           tuple(layout.moe_pattern(rank, c) for c in range(layout.chunks)))
    return _memo(_WORKING_SETS, key, lambda: _working_set(layout, rank, n, fp8))


_WORKING_SETS: dict = {}


def _working_set(layout, rank: int, n: int, fp8: bool) -> float:
    best = 0.0
    for chunk in range(layout.chunks):
        sizes = [layer_activation_bytes(layout.shape_of(layer), fp8=fp8) for layer in layout.layers_of(rank, chunk)]
        best = max([best] + [sum(sizes[i:i + n]) for i in range(0, len(sizes), n)])
    return best


def zero3_gathered_parameters(layout, rank: int) -> float:
    """The most parameters ZeRO-3 / FSDP holds gathered at once on a GPU of pipeline rank `rank`, the layout's
    framework's way (data_parallel/gathering.py): per model chunk, the units in use, prefetched and kept over its
    forward and backward, plus what the other chunks' forwards keep gathered. Cached by what the passes' uses
    depend on (pass_uses): layouts of other batches, schedules and memory settings share it."""
    g, params = gathering(layout.config), stage_parameters(layout, rank)
    parts = tuple(layout.pass_parts(rank, c, ph) for c in range(layout.chunks) for ph in "FB")
    key = (g, layout.layer_shape if g.modules else None, layout.layer_params, params["embedding"],
           params["output"], parts)
    return _memo(_GATHERED, key, lambda: _gathered(layout, rank, g, params))


_GATHERED: dict = {}


def _gathered(layout, rank: int, g, params: dict) -> float:
    walks, kept = [], []
    for c in range(layout.chunks):
        f, b = (pass_uses(g, layout, rank, c, ph, params) for ph in "FB")
        walks.append(g.peak_gathered([f, b]))
        held = g.plan(f, b)[2]
        kept.append(sum({u.unit: u.params for u in f if u.unit in held}.values()))
    return max(w + sum(kept) - k for w, k in zip(walks, kept))


_IN_FLIGHT: dict = {}


def in_flight(layout, rank: int) -> tuple[tuple[int, ...], ...]:
    """Walking the rank's schedule: the micro-batches in flight per model chunk wherever a forward is followed by
    something else or ends the schedule (where the activations peak), each distinct count once, in order of first
    occurrence. A micro-batch whose input gradient ran but whose weight gradient has not still counts whole (Qi et
    al. 2023's accounting: W keeps the layers' inputs and their output gradients). Cached per schedule: a layout
    search asks for thousands of layouts that share one."""
    key = (layout.schedule_key, rank)
    if key not in _IN_FLIGHT:
        if len(_IN_FLIGHT) >= 4096:
            _IN_FLIGHT.clear()
        v = layout.chunks
        _IN_FLIGHT[key] = tuple(dict.fromkeys(tuple(x + y for x, y in zip(held[:v], held[v:]))
                                              for held in held_at_peaks(layout.schedule[rank], v)))
    return _IN_FLIGHT[key]


_PEAKS: dict = {}


def _activation_peak(layout, rank: int, per_chunk: list[float]) -> tuple[float, int]:
    """(bytes, micro-batch-chunks) of the rank's activations at their peak: the first of the largest of its
    in-flight states, each chunk's micro-batch `per_chunk` bytes. Cached by the schedule and those bytes (layouts
    of other ZeRO stages share them)."""
    key = (layout.schedule_key, rank, tuple(per_chunk))
    return _memo(_PEAKS, key, lambda: _first_largest(in_flight(layout, rank), per_chunk))


def _first_largest(flights, per_chunk: list[float]) -> tuple[float, int]:
    peak, peak_count = 0.0, 0
    for counts in flights:
        live = sum(n * x for n, x in zip(counts, per_chunk))
        if live > peak:
            peak, peak_count = live, sum(counts)
    return peak, peak_count


def stage_memory(layout, rank: int, capacity: float, fp8: bool = False) -> StageMemory:
    """Peak memory of one GPU of pipeline rank `rank` under the layout's schedule."""
    cfg, dims = layout.config, layout.dims
    shape = layout.layer_shape
    params = stage_parameters(layout, rank)
    n = sum(params.values())
    experts = params.get("experts", 0.0)
    per = bytes_per_parameter(cfg.param_bytes, cfg.grad_bytes, cfg.stage, layout.data_parallel_shards)
    # the experts' state is sharded over their own data-parallel group (edp), as Megatron-Core's distributed
    # optimizer keeps a second buffer for them
    per_expert = bytes_per_parameter(cfg.param_bytes, cfg.grad_bytes, cfg.stage, dims.edp)
    cats = {k: v * (n - experts) + per_expert[k] * experts for k, v in per.items()}
    if fp8:
        cats["weights"] += 2 * n  # FP8 copies of the weights and their transposes (Transformer Engine)
    per_chunk = [_chunk_activations(layout, shape, rank, ch) for ch in range(layout.chunks)]
    peak, peak_count = _activation_peak(layout, rank, per_chunk)
    cats["activations"] = peak
    transient = _transient(layout, shape, rank)
    cats["transient"] = float(sum(transient.values()))
    cats["reserved"] = float(cfg.memory_reserved)
    allocated = sum(v for k, v in cats.items() if k != "reserved")
    cats["fragmentation"] = allocated * cfg.memory_fragmentation
    gpu = rank * (dims.world_size // dims.pp)  # dims.ranks(pp=rank, dp=0, cp=0, tp=0): the grid is pp-major
    details = {"activations_per_microbatch": per_chunk, "transient_detail": transient,
               "bytes_per_parameter": per, "parameters_detail": params}
    return StageMemory(rank, gpu, cats, float(capacity), peak_count, n, details)


def check_fits(stages: list[StageMemory], device_name: str) -> None:
    """Raise OutOfMemoryError for the stage that overflows most, naming the GPU and its largest consumers."""
    over = [s for s in stages if not s.fits]
    if not over:
        return
    worst = max(over, key=lambda s: s.peak - s.capacity)
    top = dict(sorted(worst.categories.items(), key=lambda kv: -kv[1])[:4])
    consumers = ", ".join(f"{k.replace('_', ' ')} {format_size(v)}" for k, v in top.items())
    others = f"; stages {', '.join(str(s.rank) for s in over if s is not worst)} also overflow" if len(over) > 1 \
        else ""
    raise OutOfMemoryError(
        f"out of memory: GPU {worst.gpu} (pipeline stage {worst.rank}, {device_name}, {format_size(worst.capacity)}) "
        f"needs {format_size(worst.peak)}: {consumers} ({worst.in_flight} micro-batch chunk(s) of activations "
        f"in flight){others}", worst.gpu, worst.capacity, worst.peak, top)
