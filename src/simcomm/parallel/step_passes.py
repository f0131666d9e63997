"""What one pipeline rank runs for one action of the schedule in the step model: a pass, and the layer templates
it is made of.

A pass runs what Layout.pass_parts lists (the embedding, the chunk's layers, the output layer with the loss;
backward in reverse with recomputation before each backward), each a layer template. Each backward part says how
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


def build_pass(layout, rank: int, chunk: int, phase: str, t: dict[str, Template]) -> Pass:
    """The pass of `phase` ('F' or 'B') of model chunk `chunk` on pipeline rank `rank` (Layout.pass_parts) from
    templates `t` (keys layer.forward, layer.backward, layer.recompute, layer.selective, embedding.forward/backward,
    output.forward/backward)."""
    per_layer = layout.layer_params
    params = stage_parameters(layout, rank)
    grads = {-1: params["embedding"], -2: params["output"]}
    parts, at = [], 0.0
    breakdown = {k: 0.0 for k in PHASES + ("tp", "cp", "interference")}
    for layer, program, ph in layout.pass_parts(rank, chunk, phase):
        tpl = t[program]
        p = grads.get(layer, per_layer) if ph == "backward" else 0.0
        parts.append(Part(layer, tpl, ph, p, at))
        at += tpl.duration
        breakdown[ph] += tpl.compute
        for axis, v in tpl.exposed.items():
            breakdown[axis] += v
        breakdown["interference"] += tpl.interference
    return Pass(tuple(parts), at, breakdown)
