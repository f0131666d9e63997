"""What one pipeline rank runs for one action of the schedule in the step model: a pass, and the layer templates
it is made of.

A forward pass of model chunk c is the embedding (first virtual stage), the chunk's layers and the output layer
with the loss (last virtual stage); a backward pass runs them in reverse, each recomputed layer's forward (full
recomputation) or core attention (selective) right before its backward. Each backward part says how many
parameters' gradients it produces (the data-parallel buckets are made of them: data_parallel/timing.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .layer_timing import Template
from .model.memory import stage_parameters

PHASES = ("forward", "backward", "recompute")


@dataclass(frozen=True)
class Part:
    """One template inside a pass: a layer (index), the embedding (-1) or the output layer (-2)."""

    layer: int
    template: Template
    phase: str  # forward | backward | recompute
    params: float  # parameters whose gradients this part produces (backward parts only)
    offset: float  # start within the pass
    expert_params: float = 0.0  # of which routed experts' (reduced over the expert-data-parallel group)


@dataclass
class Pass:
    parts: tuple[Part, ...]
    duration: float
    breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(p.layer for p in self.parts if p.layer >= 0 and p.phase != "recompute")


def build_pass(layout, rank: int, chunk: int, phase: str, t: dict[str, Template]) -> Pass:
    """The pass of `phase` ('F' or 'B') of model chunk `chunk` on pipeline rank `rank` from templates `t` (keys
    layer.forward, layer.backward, layer.recompute, layer.selective, embedding.forward/backward,
    output.forward/backward; an MoE layer's the same prefixed moe_)."""
    params = stage_parameters(layout, rank)
    moe = layout.model.moe_layers

    def tpl(i: int, name: str) -> Template:
        return t[("moe_" if moe[i] else "") + name]
    layers = layout.layers_of(rank, chunk)
    seq: list[tuple[int, Template, str, float]] = []  # (layer, template, phase, parameters)
    if phase == "F":
        if layout.has_embedding(rank, chunk):
            seq.append((-1, t["embedding.forward"], "forward", 0.0))
        seq += [(i, tpl(i, "layer.forward"), "forward", 0.0) for i in layers]
        if layout.has_output(rank, chunk):
            seq.append((-2, t["output.forward"], "forward", 0.0))
    else:
        if layout.has_output(rank, chunk):
            seq.append((-2, t["output.backward"], "backward", params["output"]))
        for pos in reversed(range(len(layers))):
            rerun = layout.recomputes(pos)
            i = layers[pos]
            if rerun:
                seq.append((i, tpl(i, "layer.recompute" if rerun == "full" else "layer.selective"), "recompute", 0.0))
            seq.append((i, tpl(i, "layer.backward"), "backward", layout.params_of(i)))
        if layout.has_embedding(rank, chunk):
            seq.append((-1, t["embedding.backward"], "backward", params["embedding"]))
    parts, at = [], 0.0
    breakdown = {k: 0.0 for k in PHASES + ("tp", "cp", "ep", "interference")}
    for layer, template, ph, p in seq:
        experts = layout.expert_params_of(layer) if layer >= 0 and ph == "backward" else 0.0
        parts.append(Part(layer, template, ph, p, at, experts))
        at += template.duration
        breakdown[ph] += template.compute
        for axis, v in template.exposed.items():
            breakdown["ep" if axis == "etp" else axis] += v  # the experts' exchanges, over EP or ETP
        breakdown["interference"] += template.interference
    return Pass(tuple(parts), at, breakdown)
