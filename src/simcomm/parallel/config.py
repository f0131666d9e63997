"""The one training configuration: Megatron-LM's argument names, validated once, every error naming its field.

Both executions read it through the layout it implies (layout.py): numeric training (rank programs on real or
size-only data) and the step cost model. Each field carries its own description, bounds and choices (`setting`);
`__post_init__` checks every one of them and then the rules between fields, raising a `ConfigError` whose `field`
is the argument to change, so a scenario error points at its YAML key without reading the message. The scenario
schema of `kind: training` is derived from these fields (workloads/training.py).

Settings that only one execution reads say so: the optimizer's arithmetic, steps, seeds and `params_dtype` are
numeric training's (the step model costs Megatron's mixed-precision Adam); memory and the FLOPs formula are the
step model's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import SettingError
from ..vocab import canonical_dtype, numpy_dtype
from .data_parallel.sharding import STRATEGIES
from .dims import LayoutError
from .model.flops import FORMULAS
from .optim import SGD, AdamW

GiB = 1 << 30
BIG = 1 << 20  # bound of the parallel sizes and layer counts (anything larger is a typo)
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
DEEPSPEED_STAGE3 = ("stage3_prefetch_bucket_size", "stage3_max_live_parameters", "stage3_max_reuse_distance",
                    "stage3_param_persistence_threshold")
FSDP_KNOBS = ("reshard_after_forward", "forward_prefetch", "backward_prefetch")


class ConfigError(LayoutError, SettingError):
    """A training setting that cannot work; `field` is the argument it is about (None: the whole layout)."""


def setting(default, doc: str, *, lo=None, hi=None, choices=None, numeric: bool = False, kind: str = ""):
    """A field with its description, bounds (lo <= value <= hi, or lo <= value < hi for floats) and choices.
    numeric: read by numeric training only; kind: how the scenario spells it ('size' for byte sizes)."""
    meta = {"doc": doc, "lo": lo, "hi": hi, "choices": choices, "numeric": numeric, "kind": kind}
    return dataclasses.field(default=default, metadata=meta)


# Megatron-Core's --recompute-modules that the step model reruns (model/layer.py RECOMPUTED says what each drops)
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act")


@dataclass(frozen=True)
class TrainingConfig:
    """Megatron-LM's training arguments (and DistributedDataParallelConfig's), plus a few simcomm knobs."""

    global_batch_size: int = setting(dataclasses.MISSING, "sequences per step", lo=1, hi=100_000_000)
    micro_batch_size: int = setting(1, "sequences per micro-batch", lo=1, hi=1_000_000)
    # -- parallelism
    tensor_model_parallel_size: int = setting(1, "TP size t", lo=1, hi=65536)
    pipeline_model_parallel_size: int = setting(1, "PP size p", lo=1, hi=65536)
    context_parallel_size: int = setting(1, "CP size c", lo=1, hi=65536)
    sequence_parallel: bool = setting(False, "sequence parallelism (with TP)")
    num_layers_per_virtual_pipeline_stage: int | None = setting(None, "layers per virtual stage (interleaving)",
                                                                lo=1, hi=BIG)
    virtual_pipeline_model_parallel_size: int | None = setting(None, "model chunks per pipeline rank "
                                                               "(interleaving; or give the layers per chunk)",
                                                               lo=1, hi=BIG)
    microbatch_group_size_per_vp_stage: int | None = setting(None, "interleaved micro-batch group (default p)",
                                                             lo=1, hi=BIG)
    decoder_first_pipeline_num_layers: int | None = setting(None, "layers on the first stage", lo=1, hi=BIG)
    decoder_last_pipeline_num_layers: int | None = setting(None, "layers on the last stage", lo=1, hi=BIG)
    account_for_embedding_in_pipeline_split: bool = setting(False, "count the embedding as a layer")
    account_for_loss_in_pipeline_split: bool = setting(False, "count the loss as a layer")
    pipeline_schedule: str = setting("auto", "auto (1F1B, interleaved with virtual stages), or a schedule by "
                                     "torch.distributed.pipelining / Megatron-LM's name",
                                     choices=("auto", "gpipe", "1f1b", "interleaved_1f1b", "looped_bfs", "zb_h1",
                                              "zb_h2", "interleaved_zb", "zbv", "dualpipe", "dualpipev"))
    world_size: int = setting(0, "GPUs used (0: every rank of the cluster)", lo=0, hi=1 << 20)
    # -- mixture of experts (the model's MoE fields say which layers are MoE and what they hold)
    expert_model_parallel_size: int = setting(1, "EP size: ranks the experts of an MoE layer are sharded over",
                                              lo=1, hi=65536)
    expert_tensor_parallel_size: int | None = setting(None, "TP inside the experts (default: "
                                                      "tensor_model_parallel_size)", lo=1, hi=65536)
    moe_token_dispatcher_type: str = setting("alltoall", "how tokens reach their experts (alltoall is modelled; "
                                             "Megatron's default is allgather)",
                                             choices=("alltoall", "allgather", "flex"))
    moe_grouped_gemm: bool = setting(False, "one grouped GEMM for a rank's experts (else one GEMM per expert)")
    moe_flex_dispatcher_backend: str = setting("deepep", "the flex dispatcher's kernels: deepep (DeepEP's "
                                               "node-limited NVLink + RDMA dispatch; hybridep is not modelled)",
                                               choices=("deepep", "hybridep"))
    moe_deepep_num_sms: int = setting(20, "SMs DeepEP's dispatch and combine kernels hold (DeepSeek-V3: 20 of 132)",
                                      lo=1, hi=1024)
    moe_dispatch_fp8: bool = setting(False, "the dispatch-shaped exchanges (dispatch, combine's backward) carry FP8 "
                                     "rows with 1x128 scales, the combine-shaped ones BF16 (DeepSeek-V3's; needs "
                                     "fp8_format and the flex dispatcher; not a Megatron-LM argument)")
    moe_shared_expert_overlap: bool = setting(False, "the shared expert's forward beside the dispatch and combine "
                                              "all-to-alls (Megatron-Core's)")
    overlap_moe_expert_parallel_comm: bool | None = setting(
        None, "DualPipe's overlapped forward-and-backward pairs interleave, each one's EP all-to-alls beside the "
        "other's compute (default: on for dualpipe and dualpipev; Megatron-LM's name, whose 1F1B form is not "
        "modelled)")
    moe_routing_skew: float = setting(0.0, "the step model's routing: expert i receives a share proportional to "
                                      "(i + 1)^-skew (0: perfectly balanced)", lo=0.0, hi=100.0)
    moe_expert_load: tuple[float, ...] | None = setting(None, "the step model's routing: relative tokens per expert "
                                                        "(a measured load; instead of moe_routing_skew)")
    # -- memory
    recompute_granularity: str | None = setting(None, "activation recomputation", choices=("full", "selective"))
    recompute_modules: tuple[str, ...] | None = setting(
        None, "selective recomputation: the modules rerun before the backward, of " + ", ".join(RECOMPUTE_MODULES) +
        " (Megatron-Core's; default core_attn)")
    recompute_method: str = setting("uniform", "full recomputation: uniform or block", choices=("uniform", "block"))
    recompute_num_layers: int | None = setting(None, "layers per group (uniform) or per chunk (block)", lo=1,
                                               hi=BIG)
    # -- data parallelism and overlap
    framework: str = setting("megatron", "whose semantics the step follows: megatron (Megatron-LM, Megatron-FSDP), "
                             "torchtitan (FSDP2) or deepspeed (ZeRO): how ZeRO-3 gathers, prefetches and reshards, "
                             "and the dtype gradients are reduced in", choices=FRAMEWORKS)
    data_parallel_sharding_strategy: str | None = setting(
        None, "what the data-parallel ranks shard (Megatron-FSDP's names): no_shard (DDP), optim (distributed "
        "optimizer, ZeRO-1), optim_grads (ZeRO-2), optim_grads_params (ZeRO-3 / FSDP); default from zero_stage "
        "or use_distributed_optimizer", choices=tuple(STRATEGIES))
    use_distributed_optimizer: bool = setting(False, "shard the optimizer state over DP (ZeRO-1; "
                                              "data_parallel_sharding_strategy optim)")
    zero_stage: int | None = setting(None, "ZeRO stage (DeepSpeed's name for data_parallel_sharding_strategy; "
                                     "default 1 with the distributed optimizer)", choices=(0, 1, 2, 3))
    reshard_after_forward: bool | None = setting(
        None, "ZeRO-3 / FSDP: free a unit's gathered parameters after its forward and gather them again for its "
        "backward (FSDP2's name; default the framework's: torchtitan's 'default' policy reshards without pipeline "
        "parallelism and keeps the output unit, Megatron-FSDP reshards the transformer layers)")
    forward_prefetch: int | None = setting(None, "ZeRO-3 / FSDP: units gathered ahead of the one computing in the "
                                           "forward (default 1: FSDP2, Megatron-FSDP; 0: none)", lo=0, hi=BIG)
    backward_prefetch: int | None = setting(None, "ZeRO-3 / FSDP: units gathered ahead of the one computing in the "
                                            "backward (default 1: FSDP2's BACKWARD_PRE; 0: none)", lo=0, hi=BIG)
    stage3_prefetch_bucket_size: int | None = setting(None, "DeepSpeed ZeRO-3: parameters prefetched ahead of the "
                                                      "module computing (default 50,000,000)", lo=0, hi=1 << 50)
    stage3_max_live_parameters: int | None = setting(None, "DeepSpeed ZeRO-3: gathered parameters resident at "
                                                     "most (default 1,000,000,000)", lo=1, hi=1 << 50)
    stage3_max_reuse_distance: int | None = setting(None, "DeepSpeed ZeRO-3: keep a module gathered when it is used "
                                                    "again within this many parameters (default 1,000,000,000)",
                                                    lo=0, hi=1 << 50)
    stage3_param_persistence_threshold: int | None = setting(None, "DeepSpeed ZeRO-3: modules with fewer "
                                                             "parameters stay whole (default 100,000)", lo=0,
                                                             hi=1 << 50)
    overlap_grad_reduce: bool = setting(False, "reduce gradient buckets during the backward")
    overlap_param_gather: bool = setting(False, "gather parameters during the next forward")
    tp_comm_overlap: bool = setting(False, "overlap TP communication with GEMMs (Transformer Engine)")
    overlap_p2p_comm: bool = setting(False, "non-blocking pipeline sends")
    bucket_size: int | None = setting(None, "parameters per gradient bucket (default max(40M, 1M x dp) with "
                                      "overlap_grad_reduce, else one bucket)", lo=1, hi=1 << 50)
    # -- precision
    bf16: bool = setting(True, "bf16 mixed precision")
    fp16: bool = setting(False, "fp16 mixed precision (set bf16: false)")
    fp8_format: str | None = setting(None, "FP8 GEMMs (Transformer Engine)", choices=("hybrid", "e4m3"))
    tf32: bool = setting(True, "with neither bf16 nor fp16: fp32 GEMMs on TF32 tensor cores (as NGC's PyTorch "
                               "containers set; false: plain PyTorch's default, full fp32)")
    accumulate_allreduce_grads_in_fp32: bool | None = setting(
        None, "fp32 gradient buffers, reduced in fp32 (Megatron's grad_reduce_in_fp32; default the framework's: "
        "Megatron on with bf16, torchtitan on (FSDP2 reduce_dtype float32), DeepSpeed off)")
    use_flash_attn: bool = setting(True, "flash attention (else materialised s x s scores; fp32 has none)")
    # -- the optimizer (Megatron's: adam is Adam with decoupled weight decay, i.e. AdamW)
    optimizer: str = setting("adam", "adam (AdamW) or sgd", choices=("adam", "sgd"), numeric=True)
    lr: float = setting(1e-3, "learning rate", lo=0.0, hi=1e6, numeric=True)
    weight_decay: float = setting(0.01, "decoupled weight decay (Adam) or L2 (SGD)", lo=0.0, hi=1e6, numeric=True)
    adam_beta1: float = setting(0.9, "Adam's beta1", lo=0.0, hi=1.0, numeric=True)
    adam_beta2: float = setting(0.999, "Adam's beta2", lo=0.0, hi=1.0, numeric=True)
    adam_eps: float = setting(1e-8, "Adam's epsilon", lo=0.0, hi=1.0, numeric=True)
    sgd_momentum: float = setting(0.9, "SGD's momentum", lo=0.0, hi=1.0, numeric=True)
    # -- numeric training's own (simcomm)
    train_iters: int = setting(1, "optimizer steps", lo=1, hi=1_000_000, numeric=True)
    seed: int = setting(0, "initial weights", lo=0, hi=(1 << 63) - 1, numeric=True)
    data_seed: int = setting(0, "synthetic token batches", lo=0, hi=(1 << 63) - 1, numeric=True)
    params_dtype: str = setting("float64", "the arrays' dtype (bfloat16 only size-only: numpy has none)",
                                choices=("float16", "float32", "float64", "bfloat16", "bf16"), numeric=True)
    size_only: bool = setting(False, "shapes without data: the same communication and time", numeric=True)
    # -- the step model's own (simcomm)
    memory_reserved: int = setting(2 * GiB, "CUDA context, NCCL and workspaces per GPU (an estimate)", lo=0,
                                   hi=1 << 50, kind="size")
    memory_fragmentation: float = setting(0.05, "allocator overhead, fraction of allocated bytes (an estimate)",
                                          lo=0.0, hi=1.0)
    flops_formula: str = setting("megatron", "model FLOPs formula for MFU: " + ", ".join(FORMULAS),
                                 choices=tuple(FORMULAS))
    ideal_network: bool = setting(False, "every transfer takes no time (the compute-only bound)")
    scatter_gather_tensors_in_pipeline: bool = setting(
        False, "without sequence parallelism each TP rank sends 1/t of a pipeline activation and the receiver "
        "all-gathers it over TP (Megatron-LM 2021-22's default; Megatron-Core has none)")
    # -- mechanisms of the step model (simcomm's): each on by default, off for an ablation
    p2p_rendezvous: bool = setting(True, "a pipeline send completes only once its receive is posted, where "
                                   "Megatron's schedules post it (false: sends start when their data is ready)")
    step_collectives: bool = setting(True, "the step's small collectives over their real groups: gradient norm and "
                                     "fp16's found-inf over the world (distributed optimizer) or the model-parallel "
                                     "group, the per-micro-batch loss over DP, sequence-parallel norm gradients over "
                                     "TP (false: one 4-byte all-reduce over a replica)")

    def __post_init__(self):
        self._validate(_CHECKS)

    def _validate(self, checks) -> None:
        """Check the fields of `checks` ((name, check) pairs, in field order) and the rules across fields."""
        for name in ("moe_expert_load", "recompute_modules"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        self._check_recompute_modules()
        for name, check in checks:
            check(getattr(self, name))
        if self.moe_expert_load is not None and self.moe_routing_skew:
            raise ConfigError("give moe_expert_load or moe_routing_skew, not both", "moe_routing_skew")
        self._check_sharding()
        if self.bf16 and self.fp16:
            raise ConfigError("bf16 and fp16 are exclusive", "fp16")
        if self.overlap_param_gather and (self.stage < 1 or not self.overlap_grad_reduce):
            raise ConfigError("overlap_param_gather needs use_distributed_optimizer (a ZeRO stage >= 1) and "
                              "overlap_grad_reduce, as in Megatron-LM", "overlap_param_gather")
        if self.num_layers_per_virtual_pipeline_stage and self.virtual_pipeline_model_parallel_size:
            raise ConfigError("give num_layers_per_virtual_pipeline_stage or virtual_pipeline_model_parallel_size, "
                              "not both (Megatron-LM refuses both)", "virtual_pipeline_model_parallel_size")
        if canonical_dtype(self.params_dtype) == "bfloat16" and not self.size_only:
            raise ConfigError(f"params_dtype {self.params_dtype!r} needs size_only=True: numpy has no bfloat16, so "
                              "a run with data cannot compute in it (use float32 or float64)", "params_dtype")

    def _check_recompute_modules(self) -> None:
        modules = self.recompute_modules
        if modules is None:
            return
        unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
        if unknown or not modules:
            raise ConfigError(f"recompute_modules: {unknown or 'none given'}: expected some of "
                              f"{', '.join(RECOMPUTE_MODULES)} (Megatron-Core's mlp, moe and shared_experts are not "
                              "modelled)", "recompute_modules")
        if self.recompute_granularity != "selective":
            raise ConfigError("recompute_modules needs recompute_granularity selective (as in Megatron-LM)",
                              "recompute_modules")

    def _check_sharding(self) -> None:
        """One sharding scheme, however it is spelled (data_parallel_sharding_strategy, zero_stage,
        use_distributed_optimizer), that the framework runs, with the framework's own knobs."""
        strategy, zero = self.data_parallel_sharding_strategy, self.zero_stage
        if strategy is not None and zero is not None and STRATEGIES[strategy] != zero:
            raise ConfigError(f"data_parallel_sharding_strategy {strategy} is ZeRO stage {STRATEGIES[strategy]}; "
                              f"zero_stage {zero} contradicts it", "data_parallel_sharding_strategy")
        if self.stage == 0 and self.use_distributed_optimizer:
            spelled = "zero_stage 0" if zero == 0 else "data_parallel_sharding_strategy no_shard"
            raise ConfigError(f"use_distributed_optimizer shards the optimizer state (ZeRO stage 1, optim); "
                              f"{spelled} contradicts it", "zero_stage" if zero == 0 else
                              "data_parallel_sharding_strategy")
        fw = self.framework
        if fw == "torchtitan" and self.stage in (1, 2):
            raise ConfigError(f"torchtitan shards with FSDP2 (optim_grads_params) or replicates (no_shard); it has no "
                              f"{self.sharding_strategy} (ZeRO-{self.stage})", "data_parallel_sharding_strategy")
        if fw == "deepspeed" and self.stage >= 2 and self.pipeline_model_parallel_size > 1:
            raise ConfigError(f"DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only, not {self.stage}",
                              "pipeline_model_parallel_size")
        knobs, owner = (FSDP_KNOBS, "deepspeed") if fw == "deepspeed" else (DEEPSPEED_STAGE3, fw)
        for name in knobs:
            if getattr(self, name) is not None:
                mine = "DeepSpeed's (framework: deepspeed)" if name.startswith("stage3_") else \
                    "FSDP's (framework: torchtitan or megatron)"
                raise ConfigError(f"{name} is {mine}; framework {owner} does not have it", name)

    # ---- derived numerics --------------------------------------------------------------------------------
    @property
    def stage(self) -> int:
        """The ZeRO stage: data_parallel_sharding_strategy's, else zero_stage, else 1 with the distributed
        optimizer, else 0."""
        if self.data_parallel_sharding_strategy is not None:
            return STRATEGIES[self.data_parallel_sharding_strategy]
        return self.zero_stage if self.zero_stage is not None else (1 if self.use_distributed_optimizer else 0)

    @property
    def sharding_strategy(self) -> str:
        """Megatron-FSDP's name of the sharding scheme: no_shard, optim, optim_grads or optim_grads_params."""
        return next(name for name, z in STRATEGIES.items() if z == self.stage)

    @property
    def param_bytes(self) -> int:
        return 2 if (self.bf16 or self.fp16) else 4

    @property
    def grad_bytes(self) -> int:
        """Gradient buffer element size, and that of the data-parallel reductions: fp32 when
        accumulate_allreduce_grads_in_fp32, whose default is the framework's: Megatron-LM forces it on with bf16
        (grad_reduce_in_fp32), torchtitan reduces in fp32 (FSDP2's MixedPrecisionPolicy reduce_dtype float32),
        DeepSpeed in the model's dtype (communication_data_type unset)."""
        fp32 = self.accumulate_allreduce_grads_in_fp32
        if fp32 is None:
            fp32 = {"megatron": self.bf16 or not self.fp16, "torchtitan": True, "deepspeed": False}[self.framework]
        return 4 if fp32 or self.param_bytes == 4 else 2

    @property
    def grad_dtype(self) -> str:
        return "float32" if self.grad_bytes == 4 else "bfloat16"

    @property
    def act_dtype(self) -> str:
        return "float16" if self.fp16 else ("bfloat16" if self.bf16 else "float32")

    @property
    def precision(self) -> str:
        """What the GEMMs, attention and memory-bound ops run in (FP8 GEMMs aside): bf16, fp16, or, with neither,
        fp32, whose GEMMs take TF32 when `tf32` (NGC's PyTorch containers, which Megatron-LM recommends, set
        TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1; plain PyTorch's allow_tf32 defaults to False: set tf32 false)."""
        return "bf16" if self.bf16 else "fp16" if self.fp16 else "tf32" if self.tf32 else "fp32"

    @property
    def flash_attention(self) -> bool:
        """Fused (flash) attention: asked for and in 16-bit; fp32 has no flash or cuDNN kernel, so Megatron-Core
        (Transformer Engine's UnfusedDotProductAttention) runs the unfused kernels."""
        return self.use_flash_attn and (self.bf16 or self.fp16)

    @property
    def etp(self) -> int:
        """Expert tensor parallelism: expert_tensor_parallel_size, else the attention's TP (Megatron's default)."""
        return self.expert_tensor_parallel_size or self.tensor_model_parallel_size

    @property
    def sp(self) -> bool:
        """Sequence parallelism is on only with tensor parallelism (Megatron turns it off at tp = 1)."""
        return self.sequence_parallel and self.tensor_model_parallel_size > 1

    @property
    def numpy_dtype(self):
        """Numeric training's arrays: params_dtype, bfloat16 held as float16 (size-only: the same 2 bytes)."""
        return np.dtype(numpy_dtype(canonical_dtype(self.params_dtype)))

    def make_optimizer(self):
        """Numeric training's optimizer: Megatron's adam is torch's AdamW; sgd is SGD with momentum."""
        if self.optimizer == "sgd":
            return SGD(lr=self.lr, momentum=self.sgd_momentum, weight_decay=self.weight_decay)
        return AdamW(lr=self.lr, betas=(self.adam_beta1, self.adam_beta2), eps=self.adam_eps,
                     weight_decay=self.weight_decay)

    def replace(self, **changes) -> "TrainingConfig":
        """dataclasses.replace(self, **changes), checking only the changed fields' values (the others were
        checked when this config was made) and every rule across fields: a layout search makes thousands."""
        unknown = changes.keys() - FIELDS.keys()
        if unknown:
            raise TypeError(f"TrainingConfig has no field {', '.join(sorted(unknown))}")
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        new._validate([(name, check) for name, check in _CHECKS if name in changes])
        return new


FIELDS = {f.name: f for f in dataclasses.fields(TrainingConfig)}


def _checker(f: dataclasses.Field):
    """A check of one field's value against its annotation, bounds and choices (a ConfigError naming it)."""
    meta, name = f.metadata, f.name
    optional = "None" in str(f.type)
    base = str(f.type).split(" |")[0]
    choices, lo, hi = meta["choices"], meta["lo"], meta["hi"]

    def check(v) -> None:
        if v is None and optional:
            return
        if choices is not None:
            if v not in choices or isinstance(v, bool):
                shown = ", ".join(map(str, choices)) + (" or none" if optional else "")
                raise ConfigError(f"{name} must be one of {shown}, got {v!r}", name)
        elif base == "bool":
            if not isinstance(v, bool):
                raise ConfigError(f"{name} must be true or false, got {v!r}", name)
        elif base == "int":
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ConfigError(f"{name} must be a whole number from {lo} to {hi:,}, got {v!r}", name)
        elif base == "float":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v < hi:
                raise ConfigError(f"{name} must be a number in [{lo:g}, {hi:g}), got {v!r}", name)
        elif base == "tuple[str, ...]":
            if not isinstance(v, tuple) or not all(isinstance(x, str) for x in v):
                raise ConfigError(f"{name} must be a list of names, got {v!r}", name)
        elif base.startswith("tuple"):
            if not isinstance(v, tuple) or not v or any(isinstance(x, bool) or not isinstance(x, (int, float))
                                                        or not 0 <= x < float("inf") for x in v) or not sum(v) > 0:
                raise ConfigError(f"{name} must be a list of numbers >= 0, not all zero, got {v!r}", name)
    return check


_CHECKS = tuple((f.name, _checker(f)) for f in dataclasses.fields(TrainingConfig))


__all__ = ["FIELDS", "FRAMEWORKS", "ConfigError", "TrainingConfig", "setting"]
