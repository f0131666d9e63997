"""A transformer training step costed on the simulated cluster (kind `training`), configured with Megatron-LM's
argument names flat under `workload`: a model preset (`model`) and any model field to override, the parallel
layout, batch sizes, recomputation, ZeRO stage / distributed optimizer, overlaps and precision.

    workload:
      kind: training
      model: llama3-70b
      tensor_model_parallel_size: 8
      pipeline_model_parallel_size: 4
      sequence_parallel: true
      micro_batch_size: 1
      global_batch_size: 512
      use_distributed_optimizer: true
      overlap_grad_reduce: true
"""
from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from pydantic import BeforeValidator, PrivateAttr, create_model, field_validator

from ..errors import SettingError, SimcommError
from ..fields import Base, Size, described
from ..parallel import (PRESETS, Layout, LayoutError, ModelConfigError, StepModel, TrainingConfig, TransformerConfig,
                        build_layout, model_preset)
from ..parallel.config import FIELDS
from ..parallel.step_trace import stage_figures
from ..units import format_size
from ..vocab import did_you_mean
from .base import RunResult, Workload

MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(TransformerConfig) if f.name != "name")
# numeric training's own settings are not the step model's: a training scenario does not offer them
STEP_FIELDS = tuple(name for name, f in FIELDS.items() if not f.metadata["numeric"])


def _spec_field(f: dataclasses.Field):
    """(annotation, pydantic field) of a TrainingConfig field: its type (choices as a Literal, byte sizes with
    units), default and description; its values are checked once, by TrainingConfig."""
    meta = f.metadata
    optional = "None" in str(f.type)
    base = {"int": int, "bool": bool, "float": float, "str": str,
            "tuple[float, ...]": list[float], "tuple[str, ...]": list[str]}[str(f.type).split(" |")[0]]
    tp = Literal[meta["choices"]] if meta["choices"] else base
    if meta["kind"] == "size":
        tp = Size
    if base is float:
        tp = Annotated[float, BeforeValidator(_number)]
    if optional:
        tp = tp | None
    default = ... if f.default is dataclasses.MISSING else f.default
    if meta["kind"] == "size":
        return tp, described(format_size(default).replace(" ", ""), meta["doc"], "size", validate_default=True)
    if f.name == "world_size":
        return int | None, described(None, "GPUs used (default: every rank of the cluster)")
    return tp, described(default, meta["doc"], "number" if base is float else None)


def _number(v):
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


class _Model(Base):
    """One training step of a decoder-only transformer (Megatron-LM's names; unset values take Megatron's
    defaults or the preset's)."""

    kind: Literal["training"] = described(doc="training")
    model: str | None = described(None, "model preset: " + ", ".join(PRESETS) + " (fields below override it)")
    # -- the model (TransformerConfig)
    num_layers: int | None = described(None, "decoder layers", ge=1, le=100_000)
    hidden_size: int | None = described(None, "hidden size h", ge=1, le=10_000_000)
    ffn_hidden_size: int | None = described(None, "MLP hidden size (default 4h)", ge=1, le=10_000_000)
    num_attention_heads: int | None = described(None, "attention heads a", ge=1, le=100_000)
    num_query_groups: int | None = described(None, "key/value heads g (grouped-query attention)", ge=1, le=100_000)
    kv_channels: int | None = described(None, "head dimension (default h / a)", ge=1, le=100_000)
    seq_length: int | None = described(None, "sequence length s", ge=1, le=10_000_000)
    padded_vocab_size: int | None = described(None, "vocabulary size V (padded)", ge=1, le=100_000_000)
    swiglu: bool | None = described(None, "SwiGLU MLP (three matrices)")
    untie_embeddings_and_output_weights: bool | None = described(None, "separate output layer")
    normalization: Literal["LayerNorm", "RMSNorm"] | None = described(None, "LayerNorm or RMSNorm")
    position_embedding_type: Literal["learned_absolute", "rope"] | None = described(None, "learned_absolute or rope")
    add_bias_linear: bool | None = described(None, "biases in linear layers")
    attention_dropout: float | None = described(None, "attention dropout probability", "number", ge=0, lt=1)
    hidden_dropout: float | None = described(None, "hidden dropout probability", "number", ge=0, lt=1)

    _layout: tuple | None = PrivateAttr(default=None)  # (cluster, the layout built for it)

    @field_validator("model")
    @classmethod
    def _model(cls, v):
        if v is not None and v.strip().lower() not in PRESETS:
            raise ValueError(f"expected a model preset, one of {', '.join(PRESETS)}{did_you_mean(v, PRESETS)}")
        return None if v is None else v.strip().lower()

    @field_validator("attention_dropout", "hidden_dropout", mode="before")
    @classmethod
    def _number(cls, v):
        return _number(v)


# The model's mixture-of-experts and multi-latent-attention fields (Megatron-Core's names; their values are checked
# by TransformerConfig, whose errors name the field).
_EXPERT_MODEL_FIELDS = {
    "num_moe_experts": (int | None, "routed experts per MoE layer (a mixture of experts)"),
    "moe_ffn_hidden_size": (int | None, "each expert's FFN width (default ffn_hidden_size)"),
    "moe_router_topk": (int | None, "experts per token"),
    "moe_shared_expert_intermediate_size": (int | None, "shared experts' total FFN width"),
    "moe_shared_expert_gate": (bool | None, "a sigmoid gate on the shared expert"),
    "moe_router_score_function": (Literal["softmax", "sigmoid"] | None, "router scores"),
    "moe_router_pre_softmax": (bool | None, "softmax over all experts before the top-k"),
    "moe_router_num_groups": (int | None, "expert groups for group-limited routing"),
    "moe_router_group_topk": (int | None, "groups a token may use"),
    "moe_router_topk_scaling_factor": (float | None, "gate multiplier"),
    "moe_router_enable_expert_bias": (bool | None, "aux-loss-free balancing bias"),
    "moe_router_bias_update_rate": (float | None, "the bias' update rate"),
    "moe_router_load_balancing_type": (str | list[str] | None, "aux_loss, seq_aux_loss or none (or a list)"),
    "moe_aux_loss_coeff": (float | list[float] | None, "load-balancing loss weight (or a list)"),
    "moe_z_loss_coeff": (float | None, "router z-loss weight"),
    "moe_expert_capacity_factor": (float | None, "expert capacity (default: dropless)"),
    "moe_pad_expert_input_to_capacity": (bool | None, "pad every expert to its capacity"),
    "moe_token_drop_policy": (Literal["probs", "position"] | None, "which tokens an expert over capacity drops"),
    "moe_layer_freq": (int | list[int] | str | None, "which layers are MoE: N (every N-th), a 0/1 list or its text"),
    "multi_latent_attention": (bool | None, "multi-latent attention (DeepSeek-V2/V3)"),
    "q_lora_rank": (int | None, "MLA: query compression rank"),
    "kv_lora_rank": (int | None, "MLA: key/value compression rank"),
    "qk_head_dim": (int | None, "MLA: query/key head dimension without RoPE"),
    "qk_pos_emb_head_dim": (int | None, "MLA: the decoupled RoPE head dimension"),
    "v_head_dim": (int | None, "MLA: value head dimension"),
}
assert set(_EXPERT_MODEL_FIELDS) | set(_Model.model_fields) >= set(MODEL_FIELDS), "a model field has no scenario key"

# The spec: the model fields above, then every TrainingConfig field the step model reads (derived), then the run's
# own switch.
TrainingSpec = create_model(
    "TrainingSpec", __base__=_Model, __doc__=_Model.__doc__,
    **{name: (tp, described(None, doc)) for name, (tp, doc) in _EXPERT_MODEL_FIELDS.items()},
    **{name: _spec_field(FIELDS[name]) for name in STEP_FIELDS},
    check_memory=(bool, described(True, "stop with an out-of-memory error when a GPU overflows")))


def model_of(spec) -> TransformerConfig:
    """The preset with the spec's model fields applied, or a model from the fields alone."""
    given = {k: getattr(spec, k) for k in MODEL_FIELDS if getattr(spec, k) is not None}
    if spec.model:
        return model_preset(spec.model, **given)
    missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "padded_vocab_size")
               if k not in given]
    if missing:
        raise ModelConfigError(f"without a model preset, give {', '.join(missing)}", "model")
    return TransformerConfig(**given)


def config_of(spec, **overrides) -> TrainingConfig:
    values = {k: getattr(spec, k) for k in STEP_FIELDS}
    values["world_size"] = spec.world_size or 0
    return TrainingConfig(**{**values, **overrides})


def layout_of(spec, cluster) -> Layout:
    """The scenario's layout on `cluster` (built once: the check keeps it for the run); a ConfigError (or
    ModelConfigError) naming the field it is about."""
    if spec._layout is None or spec._layout[0] is not cluster:
        spec._layout = (cluster, build_layout(model_of(spec), config_of(spec), cluster.num_ranks))
    return spec._layout[1]


def _path_for(exc: SimcommError) -> tuple:
    """The workload key an error is about: the field a ConfigError or ModelConfigError carries."""
    field = exc.field if isinstance(exc, SettingError) else None
    return ("workload", field) if field else ("workload",)


class TrainingResult(RunResult):
    """A RunResult whose timeline shows only the simulated replica's GPUs (and what they took part in)."""

    traced: frozenset = frozenset()

    def activities(self, kernels: bool = False) -> list:
        acts = super().activities(kernels)
        return [a for a in acts if a.rank in self.traced] if self.traced else acts

    def about_ranks(self, activities) -> dict:
        return stage_figures(self.step, activities)


class TrainingWorkload(Workload):
    kind = "training"
    Spec = TrainingSpec
    plots = ("schedule", "breakdown", "timeline")

    def check(self, spec, scenario, cluster, error) -> None:
        try:
            layout_of(spec, cluster)
        except (LayoutError, ModelConfigError, SimcommError) as exc:
            raise error(_path_for(exc), str(exc)) from None

    def run(self, spec, scenario, cluster, name: str, detail: str | None, progress=None) -> RunResult:
        layout = layout_of(spec, cluster)
        model = StepModel(layout, cluster, detail=detail if detail in ("flows", "steps") else "steps",
                          check_memory=spec.check_memory)
        step = model.run()
        dims = layout.dims
        traced = frozenset(int(x) for x in dims.ranks(dp=0).reshape(-1))
        rows = [{"stage": r, "gpu": m.gpu, "finish": step.finish[r], **{k: b[k] for k in step.categories},
                 "peak_memory": m.peak} for r, (b, m) in enumerate(zip(step.stages, step.memory))]
        result = TrainingResult(name, self.kind, cluster, rows, step.simulation, notes=list(step.notes),
                                details={"step": step.as_dict()})
        result.traced = traced
        result.copies = step.copies
        result.step = step
        result.plot_data["breakdown"] = result.details["step"]
        return result

    def summary(self, result: RunResult) -> list[dict]:
        s = result.details["step"]
        return [{"step_time": s["step_time"], "tflops_per_gpu": s["tflops_per_gpu"], "mfu": s["mfu"],
                 "tokens_per_second": s["tokens_per_second"], "peak_memory": s["memory"]["peak"]}]

    def report(self, result: RunResult) -> list:
        step = result.step
        s = step.as_dict()
        head = (f"{step.layout.model.name or 'model'} on {step.world} GPUs: {s['layout']}\n"
                f"step {step.step_time:.4g} s | {step.tflops_per_gpu:.1f} TFLOP/s per GPU | MFU {step.mfu:.1%} | "
                f"HFU {step.hfu:.1%} | {step.tokens_per_second:,.0f} tokens/s | peak memory "
                f"{format_size(step.peak_memory)} of {format_size(step.memory[0].capacity)}\n"
                f"FLOPs: {step.formula}; peak {step.peak / 1e12:.1f} TFLOP/s per GPU (dense bf16, {step.device})")
        breakdown = ("where the time goes (mean over pipeline stages)", ["", "ms", "share"],
                     [(k, f"{v * 1e3:.4g}", f"{share:.1%}") for k, v, share in step.summary_rows()])
        cats = list(step.memory[0].categories)
        memory = ("memory per GPU at the schedule's peak", ["stage", *[c.replace("_", " ") for c in cats], "peak",
                                                            "of HBM", "in flight"], step.memory_rows())
        return [head, breakdown, memory]


WORKLOAD = TrainingWorkload()
