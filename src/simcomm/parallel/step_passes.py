"""What one pipeline rank runs for one action of the schedule in the step model: a pass, and the layer templates
it is made of.

A forward pass of model chunk c is the embedding (first virtual stage), the chunk's layers and the output layer
with the loss (last virtual stage); a backward pass runs them in reverse, each recomputed layer's forward (full
recomputation) or core attention (selective) right before its backward. Split in two (zero-bubble schedules), the
input pass (I) runs all but the weight-gradient GEMMs and the weight pass (W) those. Each backward part says how
many parameters' gradients it produces (the data-parallel buckets are made of them: data_parallel/timing.py).
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


@dataclass
class Pass:
    parts: tuple[Part, ...]
    duration: float
    breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def layers(self) -> tuple[int, ...]:
        return tuple(p.layer for p in self.parts if p.layer >= 0 and p.phase != "recompute")


BACKWARD_PROGRAMS = {"B": "backward", "I": "backward_input", "W": "backward_weight"}


def build_pass(layout, rank: int, chunk: int, phase: str, t: dict[str, Template]) -> Pass:
    """The pass of `phase` (F, B, or the backward split: I and W) of model chunk `chunk` on pipeline rank `rank`
    from templates `t` (keys layer.forward, layer.backward, layer.recompute, layer.selective,
    embedding.forward/backward, output.forward/backward, and the backward_input / backward_weight forms). The
    recomputation runs before the input gradient needs it; the gradients are made by B, or by W."""
    per_layer = layout.layer_params
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
        program, grads = BACKWARD_PROGRAMS[phase], phase != "I"
        if layout.has_output(rank, chunk):
            seq.append((-2, t[f"output.{program}"], "backward", params["output"] if grads else 0.0))
        for pos in reversed(range(len(layers))):
            rerun = layout.recomputes(pos) if phase != "W" else None
            if rerun:
                seq.append((layers[pos], t["layer.recompute" if rerun == "full" else "layer.selective"], "recompute",
                            0.0))
            seq.append((layers[pos], t[f"layer.{program}"], "backward", per_layer if grads else 0.0))
        if layout.has_embedding(rank, chunk):
            seq.append((-1, t[f"embedding.{program}"], "backward", params["embedding"] if grads else 0.0))
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
