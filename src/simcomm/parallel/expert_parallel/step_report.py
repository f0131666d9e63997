"""What a step's MoE layers cost, for the step JSON: per GPU of each pipeline stage over the step, the router, the
experts' GEMMs and activation, the dispatch and combine exchanges (their time on the wire, the part the compute
stream waited for -- exposed -- and the rest, hidden beside compute), and what the routing's imbalance costs: the
busiest EP rank's expert compute and exposed exchanges minus what a perfectly balanced router gives the same layout
(its templates timed too, each pass alone)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..model import programs
from ..pipeline_parallel.pair_timing import overlaps_pairs

ROUTER = ("router",)
EXPERTS = ("moe.fc1", "moe.fc2", "moe.gelu", "moe.swiglu")
EXCHANGE_AXES = ("ep", "etp")


def expert_groups(dims, stage: int) -> dict[str, np.ndarray]:
    """The EP and ETP groups (rows of global ranks) with a rank in data-parallel replica 0 of pipeline stage
    `stage`: where the step model runs an MoE layer's exchanges."""
    replica = set(dims.ranks(pp=stage, dp=0).reshape(-1).tolist())
    out = {}
    for axis in ("ep", "etp"):
        groups = dims.groups(axis)
        out[axis] = groups[[bool(replica & set(g.tolist())) for g in groups]]
    return out


def _template_costs(tpl) -> dict[str, float]:
    out = {"router": 0.0, "expert_compute": 0.0, "dispatch_combine": 0.0}
    for seg in tpl.segments:
        span = seg.end - seg.start
        if seg.stream == "compute" and seg.name.startswith(ROUTER):
            out["router"] += span
        elif seg.stream == "compute" and seg.name.startswith(EXPERTS):
            out["expert_compute"] += span
        elif seg.stream in EXCHANGE_AXES:
            out["dispatch_combine"] += span
    out["dispatch_combine_exposed"] = sum(tpl.exposed.get(a, 0.0) for a in EXCHANGE_AXES)
    return out


def _per_layer(model, stage: int, shape) -> dict[str, float]:
    """One MoE layer's forward and backward (and recomputed forward) costs on pipeline stage `stage`."""
    cfg, dims = model.cfg, model.dims
    experts = expert_groups(dims, stage)
    total: dict[str, float] = {}
    names = ["layer.forward", "layer.backward"] + (["layer.recompute"] if cfg.recompute_granularity == "full" else [])
    for name in names:
        tpl = model.templates.get(model.cm, dims.ranks(pp=stage, dp=0), shape, cfg.act_dtype, cfg.ideal_network,
                                  name, experts)
        for k, v in _template_costs(tpl).items():
            total[k] = total.get(k, 0.0) + v
    return total


def moe_breakdown(model, acc=None) -> dict:
    """The `moe` object of the step JSON (see the module docstring); per stage, seconds per GPU per step. Where
    DualPipe's pairs interleave, what the exchanges left exposed is the step's (acc: the stages' breakdowns), the
    layers' templates having timed each pass alone."""
    layout = model.layout
    paired = acc is not None and overlaps_pairs(layout)
    shape = layout.moe_layer_shape
    balanced = replace(shape, routing=())
    stages = []
    for r in range(layout.dims.pp):
        n = sum(layout.model.moe_layers[i] for c in range(layout.chunks) for i in layout.layers_of(r, c))
        n *= layout.microbatches
        got, even = _per_layer(model, r, shape), _per_layer(model, r, balanced)
        row = {k: v * n for k, v in got.items()}
        if paired:
            row["dispatch_combine_exposed"] = acc[r]["ep"]
        row["dispatch_combine_hidden"] = row["dispatch_combine"] - row["dispatch_combine_exposed"]
        row["imbalance"] = n * ((got["expert_compute"] - even["expert_compute"]) +
                                (got["dispatch_combine_exposed"] - even["dispatch_combine_exposed"]))
        row["moe_layers_x_microbatches"] = n
        stages.append(row)
    keys = [k for k in stages[0] if k != "moe_layers_x_microbatches"]
    ep_flops = sum(k.flops for st in programs.layer_forward(shape) for k in st.compute if k.name.startswith(EXPERTS))
    return {"mean": {k: sum(s[k] for s in stages) / len(stages) for k in keys}, "per_stage": stages,
            "routing": "balanced" if not shape.routing else list(shape.routing),
            "busiest_rank_expert_flops_per_microbatch": ep_flops,
            "expert_model_parallel_size": layout.dims.ep, "expert_tensor_parallel_size": layout.dims.etp,
            "expert_data_parallel_size": layout.dims.edp}


__all__ = ["expert_groups", "moe_breakdown"]
