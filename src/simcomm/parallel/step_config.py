"""A training job's parallel and numeric settings with Megatron-LM's argument names, and the layout they imply:
the rank grid, micro-batches per pipeline, the pipeline schedule, and which layers each (virtual) stage holds.

Megatron-LM's rules are kept: global_batch_size = micro_batch_size x data-parallel size x micro-batches;
num_layers_per_virtual_pipeline_stage gives v = layers per stage / that; account_for_embedding_in_pipeline_split
and account_for_loss_in_pipeline_split count the embedding and the loss as one layer each in the first and last
virtual stage (how Llama 3 balanced its stages); decoder_first/last_pipeline_num_layers set the first and last
stage's layer counts. Everything that cannot be built raises a LayoutError naming the argument.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..errors import SimcommError
from .dims import LayoutError, ParallelDims
from .model.config import TransformerConfig
from .pipeline_parallel.schedules import interleaved_1f1b
from .pipeline_parallel.schedules import schedule as make_schedule

GiB = 1 << 30
RECOMPUTE = (None, "full", "selective")
SCHEDULES = ("auto", "gpipe", "1f1b", "interleaved_1f1b")


@dataclass(frozen=True)
class TrainingConfig:
    """Megatron-LM's names (training arguments and DistributedDataParallelConfig), plus a few simcomm knobs."""

    global_batch_size: int
    micro_batch_size: int = 1
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    sequence_parallel: bool = False
    num_layers_per_virtual_pipeline_stage: int | None = None
    microbatch_group_size_per_vp_stage: int | None = None
    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    pipeline_schedule: str = "auto"  # auto: Megatron's choice (interleaved when v > 1); or gpipe
    recompute_granularity: str | None = None  # full | selective
    recompute_method: str = "uniform"  # uniform | block
    recompute_num_layers: int | None = None
    use_distributed_optimizer: bool = False
    zero_stage: int | None = None  # None: 1 with the distributed optimizer, else 0
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    overlap_p2p_comm: bool = False
    bucket_size: int | None = None  # parameters per gradient bucket (None: Megatron's default)
    bf16: bool = True
    fp16: bool = False
    fp8_format: str | None = None  # hybrid | e4m3
    tf32: bool = True  # fp32 GEMMs on TF32 tensor cores (no Megatron argument: NGC's PyTorch sets it, see precision)
    accumulate_allreduce_grads_in_fp32: bool | None = None  # None: True with bf16 (Megatron forces it)
    use_flash_attn: bool = True
    world_size: int = 0  # 0: every rank of the cluster
    # simcomm's own knobs
    memory_reserved: int = 2 * GiB  # CUDA context, NCCL and cuBLAS workspaces per GPU (an estimate)
    memory_fragmentation: float = 0.05  # allocator overhead as a fraction of allocated bytes (an estimate)
    flops_formula: str = "megatron"
    ideal_network: bool = False  # every transfer takes no time: the compute-only bound

    def __post_init__(self):
        for name in ("global_batch_size", "micro_batch_size", "tensor_model_parallel_size",
                     "pipeline_model_parallel_size", "context_parallel_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise LayoutError(f"{name} must be a whole number >= 1, got {v!r}")
        if self.recompute_granularity not in RECOMPUTE:
            raise LayoutError(f"recompute_granularity must be full, selective or none, got "
                              f"{self.recompute_granularity!r}")
        if self.recompute_method not in ("uniform", "block"):
            raise LayoutError(f"recompute_method must be uniform or block, got {self.recompute_method!r}")
        if self.pipeline_schedule not in SCHEDULES:
            raise LayoutError(f"pipeline_schedule must be one of {', '.join(SCHEDULES)}, got "
                              f"{self.pipeline_schedule!r}")
        if self.zero_stage is not None and self.zero_stage not in (0, 1, 2, 3):
            raise LayoutError(f"zero_stage must be 0, 1, 2 or 3, got {self.zero_stage!r}")
        if self.zero_stage == 0 and self.use_distributed_optimizer:
            raise LayoutError("use_distributed_optimizer shards the optimizer state (ZeRO stage 1); zero_stage 0 "
                              "contradicts it")
        if self.bf16 and self.fp16:
            raise LayoutError("bf16 and fp16 are exclusive")
        if self.fp8_format not in (None, "hybrid", "e4m3"):
            raise LayoutError(f"fp8_format must be hybrid or e4m3, got {self.fp8_format!r}")
        if self.overlap_param_gather and (self.stage < 1 or not self.overlap_grad_reduce):
            raise LayoutError("overlap_param_gather needs use_distributed_optimizer (a ZeRO stage >= 1) and "
                              "overlap_grad_reduce, as in Megatron-LM")
        if not 0 <= self.memory_fragmentation < 1:
            raise LayoutError(f"memory_fragmentation must be in [0, 1), got {self.memory_fragmentation!r}")

    # ---- derived numerics --------------------------------------------------------------------------------
    @property
    def stage(self) -> int:
        """The ZeRO stage: zero_stage, else 1 with the distributed optimizer, else 0."""
        return self.zero_stage if self.zero_stage is not None else (1 if self.use_distributed_optimizer else 0)

    @property
    def param_bytes(self) -> int:
        return 2 if (self.bf16 or self.fp16) else 4

    @property
    def grad_bytes(self) -> int:
        """Gradient buffer element size: fp32 when accumulate_allreduce_grads_in_fp32 (forced on with bf16)."""
        fp32 = self.accumulate_allreduce_grads_in_fp32
        if fp32 is None:
            fp32 = self.bf16 or not self.fp16
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
    def sp(self) -> bool:
        """Sequence parallelism is on only with tensor parallelism (Megatron turns it off at tp = 1)."""
        return self.sequence_parallel and self.tensor_model_parallel_size > 1


@dataclass(frozen=True)
class Layout:
    """What a TrainingConfig means for one model and world size."""

    config: TrainingConfig
    model: TransformerConfig
    dims: ParallelDims
    microbatches: int  # per pipeline (per data-parallel replica)
    chunks: int  # v, model chunks per pipeline rank
    schedule_name: str
    stage_layers: tuple[tuple[tuple[int, ...], ...], ...]  # [pipeline rank][chunk] -> layer indices
    schedule: list = field(repr=False, compare=False, default=None)

    @property
    def virtual_stages(self) -> int:
        return self.dims.pp * self.chunks

    def layers_of(self, rank: int, chunk: int) -> tuple[int, ...]:
        return self.stage_layers[rank][chunk]

    def has_embedding(self, rank: int, chunk: int) -> bool:
        return rank == 0 and chunk == 0

    def has_output(self, rank: int, chunk: int) -> bool:
        return rank == self.dims.pp - 1 and chunk == self.chunks - 1

    def describe(self) -> str:
        c = self.config
        v = f" v={self.chunks}" if self.chunks > 1 else ""
        return (f"tp={self.dims.tp} pp={self.dims.pp} cp={self.dims.cp} dp={self.dims.dp}{v} "
                f"mbs={c.micro_batch_size} m={self.microbatches} {self.schedule_name} zero={c.stage} "
                f"recompute={c.recompute_granularity or 'none'}{' sp' if c.sp else ''}")


def build_layout(model: TransformerConfig, config: TrainingConfig, world_size: int) -> Layout:
    """Validate `config` against the model and world size (Megatron's rules) and derive the layout."""
    c = config
    tp, pp, cp = c.tensor_model_parallel_size, c.pipeline_model_parallel_size, c.context_parallel_size
    dims = ParallelDims(tp=tp, pp=pp, cp=cp, world_size=c.world_size or world_size)
    if dims.world_size > world_size:
        raise LayoutError(f"world_size {dims.world_size} is more than the cluster's {world_size} ranks")
    for what, n in (("num_attention_heads", model.num_attention_heads), ("num_query_groups", model.num_query_groups),
                    ("ffn_hidden_size", model.ffn_hidden_size), ("padded_vocab_size", model.padded_vocab_size)):
        if n % tp:
            raise LayoutError(f"{what} ({n}) is not divisible by tensor_model_parallel_size ({tp})")
    if cp > 1 and model.seq_length % (2 * cp):
        raise LayoutError(f"seq_length ({model.seq_length}) must divide into 2 x context_parallel_size = {2 * cp} "
                          "chunks (causal load balancing)")
    if c.sp and (model.seq_length // cp) % tp:
        raise LayoutError(f"with sequence_parallel the sequence per context-parallel rank "
                          f"({model.seq_length // cp}) must be divisible by tensor_model_parallel_size ({tp})")
    per_pipeline = c.micro_batch_size * dims.dp
    if c.global_batch_size % per_pipeline:
        raise LayoutError(f"global_batch_size ({c.global_batch_size}) is not divisible by micro_batch_size "
                          f"({c.micro_batch_size}) x data-parallel size ({dims.dp})")
    m = c.global_batch_size // per_pipeline
    if c.stage == 3 and pp > 1:
        raise LayoutError("ZeRO stage 3 shards parameters across data-parallel ranks, which neither DeepSpeed nor "
                          "Megatron-LM combines with pipeline parallelism; use zero_stage <= 2 or pp = 1")
    chunks, layers = _assign_layers(model, c, pp)
    name = c.pipeline_schedule
    if name == "auto":
        name = "interleaved_1f1b" if chunks > 1 else "1f1b"
    if name == "interleaved_1f1b" and chunks == 1:
        raise LayoutError("pipeline_schedule interleaved_1f1b needs num_layers_per_virtual_pipeline_stage")
    if name != "interleaved_1f1b" and chunks > 1:
        raise LayoutError(f"pipeline_schedule {name} runs one model chunk per stage; "
                          "num_layers_per_virtual_pipeline_stage needs interleaved_1f1b")
    if name == "interleaved_1f1b" and pp < 2:
        raise LayoutError("the interleaved schedule needs pipeline_model_parallel_size >= 2")
    if c.recompute_granularity == "full" and c.recompute_method == "block" and not c.recompute_num_layers:
        raise LayoutError("recompute_method block needs recompute_num_layers")
    try:
        sched = _schedule(name, pp, m, chunks, c.microbatch_group_size_per_vp_stage)
    except SimcommError as exc:
        raise LayoutError(str(exc)) from None
    return Layout(c, model, dims, m, chunks, name, layers, sched)


@lru_cache(maxsize=32)
def _schedule(name: str, pp: int, m: int, chunks: int, group_size: int | None):
    """The schedule's actions per rank; shared by the layouts that have the same one (a layout search builds
    thousands whose ZeRO stage or recomputation differ), so read-only."""
    if name == "interleaved_1f1b":
        return interleaved_1f1b(pp, m, chunks, group_size)
    return make_schedule(name, pp, m, 1)


def _assign_layers(model: TransformerConfig, c: TrainingConfig, pp: int):
    """(v, [rank][chunk] -> layer indices): Megatron's pipeline split of the decoder layers."""
    L = model.num_layers
    emb, loss = int(c.account_for_embedding_in_pipeline_split), int(c.account_for_loss_in_pipeline_split)
    first, last = c.decoder_first_pipeline_num_layers, c.decoder_last_pipeline_num_layers
    if (first is not None or last is not None) and (emb or loss):
        raise LayoutError("decoder_first/last_pipeline_num_layers and account_for_*_in_pipeline_split are "
                          "exclusive")
    if first is not None or last is not None:
        if c.num_layers_per_virtual_pipeline_stage:
            raise LayoutError("decoder_first/last_pipeline_num_layers are supported here without virtual stages")
        counts = _uneven(L, pp, first, last)
        starts = [sum(counts[:r]) for r in range(pp)]
        return 1, tuple((tuple(range(starts[r], starts[r] + counts[r])),) for r in range(pp))
    slots = L + emb + loss
    if slots % pp:
        extra = (" + embedding" if emb else "") + (" + loss" if loss else "")
        raise LayoutError(f"num_layers ({L}{extra + f' = {slots}' if extra else ''}) is not divisible by "
                          f"pipeline_model_parallel_size ({pp})")
    per_stage = slots // pp
    v = 1
    if c.num_layers_per_virtual_pipeline_stage:
        n = c.num_layers_per_virtual_pipeline_stage
        if n < 1 or per_stage % n:
            raise LayoutError(f"num_layers_per_virtual_pipeline_stage ({n}) must divide the layers per pipeline "
                              f"stage ({per_stage})")
        v = per_stage // n
    per_vs = per_stage // v
    if (emb and per_vs <= 1 and pp * v > 1) or (loss and per_vs <= 1 and pp * v > 1):
        raise LayoutError("a virtual stage that holds only the embedding or the loss has no decoder layers")
    out, nxt = [[None] * v for _ in range(pp)], 0
    for chunk in range(v):
        for rank in range(pp):
            vs = chunk * pp + rank
            n = per_vs - (emb if vs == 0 else 0) - (loss if vs == pp * v - 1 else 0)
            out[rank][chunk] = tuple(range(nxt, nxt + n))
            nxt += n
    return v, tuple(tuple(r) for r in out)


def _uneven(L: int, pp: int, first: int | None, last: int | None) -> list[int]:
    if pp == 1:
        raise LayoutError("decoder_first/last_pipeline_num_layers need pipeline_model_parallel_size > 1")
    fixed = [x for x in (first, last) if x is not None]
    if any(x < 1 for x in fixed):
        raise LayoutError("decoder_first/last_pipeline_num_layers must be >= 1")
    middle_ranks = pp - len(fixed)
    rest = L - sum(fixed)
    if middle_ranks == 0:
        if rest:
            raise LayoutError(f"decoder_first/last_pipeline_num_layers ({first}, {last}) do not add up to "
                              f"num_layers ({L})")
        return [first, last]
    if rest < middle_ranks or rest % middle_ranks:
        raise LayoutError(f"the {rest} layers left after decoder_first/last_pipeline_num_layers do not divide "
                          f"evenly over the other {middle_ranks} pipeline stages")
    per = rest // middle_ranks
    return [first if first is not None else per] + [per] * (pp - 2) + [last if last is not None else per]
