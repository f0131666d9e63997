"""What one pipeline rank runs for one action of the schedule: a pass, the layer templates it is made of, and the
gradient buckets its backward fills.

A forward pass of model chunk c is the embedding (first virtual stage), the chunk's layers and the output layer
with the loss (last virtual stage); a backward pass runs them in reverse, each recomputed layer's forward (full
recomputation) or core attention (selective) right before its backward. Gradient buckets follow Megatron-LM's
DistributedDataParallel: per model chunk, parameters in backward order, a new bucket once one holds
`bucket_size` parameters (default max(40M, 1M x data-parallel size) with overlap_grad_reduce, else one bucket).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .model.flops import attention_params, mlp_params, norm_params
from .model.memory import stage_parameters
from .templates import Template

PHASES = ("forward", "backward", "recompute")


@dataclass(frozen=True)
class Part:
    """One template inside a pass: a layer (index), the embedding (-1) or the output layer (-2)."""

    layer: int
    template: Template
    phase: str  # forward | backward | recompute
    params: float  # parameters whose gradients this part produces (backward parts only)
    offset: float  # start within the pass


@dataclass
class Pass:
    parts: tuple[Part, ...]
    duration: float
    breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(p.layer for p in self.parts if p.layer >= 0 and p.phase != "recompute")


@dataclass(frozen=True)
class Bucket:
    """A gradient bucket: parameters, the offset in the backward pass at which its last gradient is ready, and
    the layers (-1 embedding, -2 output) whose gradients it holds."""

    params: float
    ready: float
    layers: tuple[int, ...]


def layer_params_per_gpu(model, tp: int) -> float:
    return (attention_params(model) + mlp_params(model)) / tp + norm_params(model)


def build_pass(layout, rank: int, chunk: int, phase: str, t: dict[str, Template]) -> Pass:
    """The pass of `phase` ('F' or 'B') of model chunk `chunk` on pipeline rank `rank` from templates `t` (keys
    layer.forward, layer.backward, layer.recompute, layer.selective, embedding.forward/backward,
    output.forward/backward)."""
    cfg, model = layout.config, layout.model
    per_layer = layer_params_per_gpu(model, layout.dims.tp)
    params = stage_parameters(layout, rank)
    layers = layout.layers_of(rank, chunk)
    seq: list[tuple[int, Template, str, float]] = []
    if phase == "F":
        if layout.has_embedding(rank, chunk):
            seq.append((-1, t["embedding.forward"], "forward", 0.0))
        seq += [(i, t["layer.forward"], "forward", 0.0) for i in layers]
        if layout.has_output(rank, chunk):
            seq.append((-2, t["output.forward"], "forward", 0.0))
    else:
        if layout.has_output(rank, chunk):
            seq.append((-2, t["output.backward"], "backward", params["output"]))
        for pos in reversed(range(len(layers))):
            if recomputed(cfg, pos):
                seq.append((layers[pos], t["layer.recompute"], "recompute", 0.0))
            elif cfg.recompute_granularity == "selective":
                seq.append((layers[pos], t["layer.selective"], "recompute", 0.0))
            seq.append((layers[pos], t["layer.backward"], "backward", per_layer))
        if layout.has_embedding(rank, chunk):
            seq.append((-1, t["embedding.backward"], "backward", params["embedding"]))
    parts, at = [], 0.0
    breakdown = {k: 0.0 for k in PHASES + ("tp", "cp", "interference")}
    for layer, tpl, ph, p in seq:
        parts.append(Part(layer, tpl, ph, p, at))
        at += tpl.duration
        breakdown[ph] += tpl.compute
        for axis, v in tpl.exposed.items():
            breakdown[axis] += v
        breakdown["interference"] += tpl.interference
    return Pass(tuple(parts), at, breakdown)


def recomputed(cfg, position: int) -> bool:
    """Whether full recomputation reruns the layer at `position` within its chunk (uniform: every layer; block:
    the first recompute_num_layers)."""
    if cfg.recompute_granularity != "full":
        return False
    return cfg.recompute_method == "uniform" or position < (cfg.recompute_num_layers or 0)


def default_bucket_size(cfg, dp_cp: int) -> float | None:
    """Megatron-LM's: max(40M, 1M x data-parallel size) parameters with overlap_grad_reduce; one bucket without."""
    if cfg.bucket_size:
        return float(cfg.bucket_size)
    return float(max(40_000_000, 1_000_000 * dp_cp)) if cfg.overlap_grad_reduce else None


def buckets(backward: Pass, size: float | None) -> list[Bucket]:
    """Gradient buckets of one chunk, in the order the backward fills them."""
    out, acc, members = [], 0.0, []
    grads = [p for p in backward.parts if p.params > 0]
    for n, p in enumerate(grads):
        acc += p.params
        members.append(p.layer)
        if (size is not None and acc >= size) or n == len(grads) - 1:
            out.append(Bucket(acc, p.offset + p.template.duration, tuple(members)))
            acc, members = 0.0, []
    return out
