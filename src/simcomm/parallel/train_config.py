"""How a numeric training run is laid out: the model, the parallel sizes (Megatron-LM's argument names), the
batch, the data-parallel flavour, the optimizer and the number of steps. Picklable, so the same description runs
on simcomm and in real torch.distributed processes."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from ..errors import SimcommError
from ..vocab import canonical_dtype, numpy_dtype
from .dims import LayoutError, ParallelDims
from .model.config import TransformerConfig
from .optim import make_optimizer

DATA_PARALLEL = ("ddp", "zero1", "zero2", "zero3")
PARAMS_DTYPES = ("float16", "float32", "float64", "bfloat16", "bf16")


@dataclass(frozen=True)
class TrainConfig:
    """A numeric training run. data_parallel: 'ddp' (all-reduce), 'zero1' (Megatron's distributed optimizer),
    'zero2' or 'zero3' (FSDP). micro_batch_size 0 means one microbatch per data-parallel rank. bucket_size is in
    elements (Megatron's default: max(40,000,000, 1,000,000 x dp)); optimizer_args are torch's keywords.

    params_dtype: float16, float32 or float64; bfloat16 (bf16) only with size_only, where it runs as float16 (numpy
    has no bfloat16: the same 2 bytes per element cost the same time, and traces name its tensors float16)."""

    model: TransformerConfig
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    data_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int = 1  # model chunks per pipeline rank (interleaved 1F1B)
    sequence_parallel: bool = False
    pipeline_schedule: str = "1f1b"  # gpipe, 1f1b, interleaved_1f1b
    global_batch_size: int = 8
    micro_batch_size: int = 0
    data_parallel: str = "ddp"
    bucket_size: int | None = 0  # 0: Megatron's default
    overlap_grad_reduce: bool = False
    optimizer: str = "adamw"
    optimizer_args: dict = field(default_factory=lambda: {"lr": 1e-3})
    train_iters: int = 1
    seed: int = 0
    data_seed: int = 0
    params_dtype: str = "float64"
    size_only: bool = False

    def __post_init__(self):
        if self.data_parallel not in DATA_PARALLEL:
            raise SimcommError(f"data_parallel must be one of {', '.join(DATA_PARALLEL)}, got {self.data_parallel!r}")
        if self.params_dtype not in PARAMS_DTYPES:
            raise SimcommError(f"params_dtype must be one of {', '.join(PARAMS_DTYPES)}, got {self.params_dtype!r}")
        if canonical_dtype(self.params_dtype) == "bfloat16" and not self.size_only:
            raise SimcommError(f"params_dtype {self.params_dtype!r} needs size_only=True: numpy has no bfloat16, so "
                               "a run with data cannot compute in it (use float32 or float64)")
        dims = self.dims
        m = self.model
        t, p, c, v = dims.tp, dims.pp, dims.cp, self.virtual_pipeline_model_parallel_size
        dp = dims.dp
        problems = []
        if m.num_layers % (p * v):
            problems.append(f"num_layers {m.num_layers} is not divisible by pipeline_model_parallel_size x "
                            f"virtual_pipeline_model_parallel_size = {p} x {v}")
        if v > 1 and p == 1:
            problems.append("virtual_pipeline_model_parallel_size > 1 needs pipeline_model_parallel_size > 1")
        if m.num_query_groups % t:
            problems.append(f"num_query_groups {m.num_query_groups} is not divisible by "
                            f"tensor_model_parallel_size {t}")
        if m.padded_vocab_size % t or m.ffn_hidden_size % t:
            problems.append(f"padded_vocab_size {m.padded_vocab_size} and ffn_hidden_size {m.ffn_hidden_size} must "
                            f"be divisible by tensor_model_parallel_size {t}")
        if m.seq_length % (2 * c if c > 1 else 1):
            problems.append(f"seq_length {m.seq_length} is not divisible by 2 x context_parallel_size = {2 * c}")
        elif self.sequence_parallel and (m.seq_length // c) % t:
            problems.append(f"sequence parallelism splits each rank's {m.seq_length // c} tokens over {t} "
                            "tensor-parallel ranks: not divisible")
        if self.global_batch_size % (dp * self.micro_batch_size_or_default):
            problems.append(f"global_batch_size {self.global_batch_size} is not divisible by data_parallel_size x "
                            f"micro_batch_size = {dp} x {self.micro_batch_size_or_default}")
        if self.train_iters < 1:
            problems.append(f"train_iters must be at least 1, got {self.train_iters}")
        if problems:
            raise LayoutError("; ".join(problems))
        self.make_optimizer()  # unknown optimizer names and keywords fail here, not on every rank

    @property
    def dims(self) -> ParallelDims:
        return ParallelDims(tp=self.tensor_model_parallel_size, pp=self.pipeline_model_parallel_size,
                            cp=self.context_parallel_size, dp=self.data_parallel_size)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The dtype the parameters and activations are held in: params_dtype, bfloat16 as float16 (size-only)."""
        return np.dtype(numpy_dtype(canonical_dtype(self.params_dtype)))

    @property
    def world_size(self) -> int:
        return self.dims.world_size

    @property
    def micro_batch_size_or_default(self) -> int:
        return self.micro_batch_size or self.global_batch_size // max(1, self.data_parallel_size)

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.dims.dp * self.micro_batch_size_or_default)

    @property
    def effective_bucket_size(self) -> int | None:
        if self.bucket_size == 0:
            return max(40_000_000, 1_000_000 * self.dims.dp)
        return self.bucket_size

    def make_optimizer(self):
        return make_optimizer(self.optimizer, **self.optimizer_args)

    def replace(self, **changes) -> "TrainConfig":
        return dataclasses.replace(self, **changes)
