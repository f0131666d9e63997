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
from typing import Literal

from pydantic import field_validator

from ..errors import SimcommError
from ..fields import Base, Size, described
from ..parallel import (PRESETS, LayoutError, ModelConfigError, StepModel, TrainingConfig, TransformerConfig,
                        build_layout, model_preset)
from ..parallel.model.flops import FORMULAS
from ..units import format_size
from ..vocab import did_you_mean
from .base import RunResult, Workload

MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(TransformerConfig) if f.name != "name")
CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(TrainingConfig))


class TrainingSpec(Base):
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
    # -- parallelism and batch
    tensor_model_parallel_size: int = described(1, "TP size t", ge=1, le=65536)
    pipeline_model_parallel_size: int = described(1, "PP size p", ge=1, le=65536)
    context_parallel_size: int = described(1, "CP size c", ge=1, le=65536)
    sequence_parallel: bool = described(False, "sequence parallelism (with TP)")
    num_layers_per_virtual_pipeline_stage: int | None = described(None, "layers per virtual stage (interleaving)",
                                                                  ge=1, le=100_000)
    microbatch_group_size_per_vp_stage: int | None = described(None, "interleaved micro-batch group (default p)",
                                                               ge=1, le=100_000)
    decoder_first_pipeline_num_layers: int | None = described(None, "layers on the first stage", ge=1, le=100_000)
    decoder_last_pipeline_num_layers: int | None = described(None, "layers on the last stage", ge=1, le=100_000)
    account_for_embedding_in_pipeline_split: bool = described(False, "count the embedding as a layer")
    account_for_loss_in_pipeline_split: bool = described(False, "count the loss as a layer")
    pipeline_schedule: Literal["auto", "gpipe", "1f1b", "interleaved_1f1b"] = described(
        "auto", "auto (1F1B, interleaved with virtual stages), gpipe, 1f1b, interleaved_1f1b")
    micro_batch_size: int = described(1, "sequences per micro-batch", ge=1, le=1_000_000)
    global_batch_size: int = described(doc="sequences per step", ge=1, le=100_000_000)
    world_size: int | None = described(None, "GPUs used (default: every rank of the cluster)", ge=1, le=1 << 20)
    # -- memory and numerics
    recompute_granularity: Literal["full", "selective"] | None = described(None, "activation recomputation")
    recompute_method: Literal["uniform", "block"] = described("uniform", "full recomputation: uniform or block")
    recompute_num_layers: int | None = described(None, "layers per group (uniform) or per chunk (block)", ge=1,
                                                 le=100_000)
    use_distributed_optimizer: bool = described(False, "shard the optimizer state over DP (ZeRO-1)")
    zero_stage: Literal[0, 1, 2, 3] | None = described(None, "ZeRO stage (default 1 with the distributed optimizer)")
    overlap_grad_reduce: bool = described(False, "reduce gradient buckets during the backward")
    overlap_param_gather: bool = described(False, "gather parameters during the next forward")
    tp_comm_overlap: bool = described(False, "overlap TP communication with GEMMs (Transformer Engine)")
    overlap_p2p_comm: bool = described(False, "non-blocking pipeline sends")
    bucket_size: int | None = described(None, "parameters per gradient bucket (default max(40M, 1M x dp))", ge=1,
                                        le=1 << 50)
    bf16: bool = described(True, "bf16 mixed precision")
    fp16: bool = described(False, "fp16 mixed precision (set bf16: false)")
    fp8_format: Literal["hybrid", "e4m3"] | None = described(None, "FP8 GEMMs (Transformer Engine)")
    tf32: bool = described(True, "with neither bf16 nor fp16: fp32 GEMMs on TF32 tensor cores (as NGC's PyTorch "
                                 "containers set; false: plain PyTorch's default, full fp32)")
    accumulate_allreduce_grads_in_fp32: bool | None = described(None, "fp32 gradient buffers (default: on with "
                                                                      "bf16)")
    use_flash_attn: bool = described(True, "flash attention (else materialised s x s scores; fp32 has none)")
    memory_reserved: Size = described("2GiB", "CUDA context, NCCL and workspaces per GPU (an estimate)", "size",
                                      validate_default=True)
    memory_fragmentation: float = described(0.05, "allocator overhead, fraction of allocated bytes (an estimate)",
                                            "number", ge=0, lt=1)
    flops_formula: str = described("megatron", "model FLOPs formula for MFU: " + ", ".join(FORMULAS))
    ideal_network: bool = described(False, "every transfer takes no time (the compute-only bound)")
    check_memory: bool = described(True, "stop with an out-of-memory error when a GPU overflows")

    @field_validator("model")
    @classmethod
    def _model(cls, v):
        if v is not None and v.strip().lower() not in PRESETS:
            raise ValueError(f"expected a model preset, one of {', '.join(PRESETS)}{did_you_mean(v, PRESETS)}")
        return None if v is None else v.strip().lower()

    @field_validator("flops_formula")
    @classmethod
    def _formula(cls, v):
        if v not in FORMULAS:
            raise ValueError(f"expected one of {', '.join(FORMULAS)}{did_you_mean(v, FORMULAS)}")
        return v

    @field_validator("attention_dropout", "hidden_dropout", "memory_fragmentation", mode="before")
    @classmethod
    def _number(cls, v):
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def model_of(spec: TrainingSpec) -> TransformerConfig:
    """The preset with the spec's model fields applied, or a model from the fields alone."""
    given = {k: getattr(spec, k) for k in MODEL_FIELDS if getattr(spec, k) is not None}
    if spec.model:
        return model_preset(spec.model, **given)
    missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "padded_vocab_size")
               if k not in given]
    if missing:
        raise ModelConfigError(f"without a model preset, give {', '.join(missing)}")
    return TransformerConfig(**given)


def config_of(spec: TrainingSpec, **overrides) -> TrainingConfig:
    values = {k: getattr(spec, k) for k in CONFIG_FIELDS if k != "world_size"}
    values["world_size"] = spec.world_size or 0
    return TrainingConfig(**{**values, **overrides})


def _path_for(message: str) -> tuple:
    """The workload key a layout or model error is about (the first parallel setting it names, else the first
    model field), for the error's key path."""
    if "tp x pp x cp" in message:
        return ("workload", "tensor_model_parallel_size")
    for fields in (CONFIG_FIELDS, MODEL_FIELDS):
        hits = [(message.find(k), k) for k in fields if k in message]
        if hits:
            return ("workload", min(hits)[1])
    return ("workload",)


class TrainingResult(RunResult):
    """A RunResult whose timeline shows only the simulated replica's GPUs (and what they took part in)."""

    traced: frozenset = frozenset()

    @property
    def timeline(self) -> list:
        acts = super().timeline
        return [a for a in acts if a.rank in self.traced] if self.traced else acts


class TrainingWorkload(Workload):
    kind = "training"
    Spec = TrainingSpec
    plots = ("schedule", "breakdown", "timeline")

    def check(self, spec: TrainingSpec, scenario, cluster, error) -> None:
        try:
            build_layout(model_of(spec), config_of(spec), cluster.num_ranks)
        except (LayoutError, ModelConfigError, SimcommError) as exc:
            raise error(_path_for(str(exc)), str(exc)) from None

    def run(self, spec: TrainingSpec, scenario, cluster, name: str, detail: str | None, progress=None) -> RunResult:
        layout = build_layout(model_of(spec), config_of(spec), cluster.num_ranks)
        model = StepModel(layout, cluster, detail=detail if detail in ("flows", "steps") else "steps",
                          check_memory=spec.check_memory)
        step = model.run()
        dims = layout.dims
        traced = frozenset(int(x) for x in dims.grid[:, 0].reshape(-1))
        rows = [{"stage": r, "gpu": int(dims.grid[r, 0, 0, 0]), "finish": step.finish[r],
                 **{k: b[k] for k in step.categories}, "peak_memory": step.memory[r].peak}
                for r, b in enumerate(step.stages)]
        result = TrainingResult(name, self.kind, cluster, rows, model.session.sim, notes=list(step.notes),
                                details={"step": step.as_dict()})
        result.traced = traced
        result.step = step
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
