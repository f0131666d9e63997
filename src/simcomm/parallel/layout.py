"""What a TrainingConfig means for one model and world size: the only home of Megatron-LM's layout rules.

`build_layout` checks the divisibility rules (heads, query groups, FFN and vocabulary by TP; the sequence by 2 CP
and, with sequence parallelism, by TP; the batch by micro-batch x DP), splits the layers over the (virtual)
pipeline stages, picks the schedule and derives the bucket size and the layer's shape on one GPU. Both executions
take the Layout it returns: numeric training (numeric_training.py) and the step model (step_cost.py); so a layout
runs on both or is refused by both, with the same message. Every refusal is a ConfigError naming its argument.

Megatron's rules: global_batch_size = micro_batch_size x data-parallel size x micro-batches;
num_layers_per_virtual_pipeline_stage n gives v = layers per stage / n (or virtual_pipeline_model_parallel_size
gives v); account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split count the embedding and
the loss as one layer each in the first and last virtual stage (how Llama 3 balanced its stages);
decoder_first/last_pipeline_num_layers set the first and last stage's layer counts; gradient buckets hold
max(40M, 1M x data-parallel size) parameters with overlap_grad_reduce (the data-parallel group widened by CP),
one bucket per model chunk without.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..errors import SimcommError
from .config import ConfigError, TrainingConfig
from .data_parallel.sharding import Sharding, sharding
from .dims import LayoutError, ParallelDims
from .model.config import TransformerConfig
from .model.flops import layer_params_per_gpu
from .model.layer import LayerShape
from .pipeline_parallel.schedules import interleaved_1f1b
from .pipeline_parallel.schedules import schedule as make_schedule

MAX_PASSES = 1 << 21  # forward and backward passes of one step's pipeline (beyond: hours of simulation)


@dataclass(frozen=True)
class Layout:
    """A validated TrainingConfig for one model and world size."""

    config: TrainingConfig
    model: TransformerConfig
    dims: ParallelDims
    microbatches: int  # per pipeline (per data-parallel replica)
    chunks: int  # v, model chunks per pipeline rank
    schedule_name: str
    stage_layers: tuple[tuple[tuple[int, ...], ...], ...]  # [pipeline rank][chunk] -> layer indices
    schedule: list = field(repr=False, compare=False, default=None)

    @property
    def world_size(self) -> int:
        return self.dims.world_size

    @property
    def virtual_stages(self) -> int:
        return self.dims.pp * self.chunks

    @property
    def data_parallel_shards(self) -> int:
        """Ranks that hold the same weights and share their gradients: dp x cp (Megatron widens DP by CP)."""
        return self.dims.dp * self.dims.cp

    @property
    def sharding(self) -> Sharding:
        """What the data-parallel ranks shard (the config's ZeRO stage)."""
        return sharding(self.config.stage)

    @property
    def bucket_size(self) -> int | None:
        """Parameters per gradient bucket (Megatron-LM's DistributedDataParallel): bucket_size when given, else
        max(40M, 1M x data-parallel size) with overlap_grad_reduce, else None (one bucket per model chunk)."""
        c = self.config
        if c.bucket_size:
            return c.bucket_size
        return max(40_000_000, 1_000_000 * self.data_parallel_shards) if c.overlap_grad_reduce else None

    @property
    def layer_shape(self) -> LayerShape:
        """One decoder layer on one GPU, one micro-batch: what its kernels, FLOPs and saved tensors depend on."""
        c = self.config
        return LayerShape(self.model, self.dims.tp, self.dims.cp, c.sp, c.micro_batch_size, c.flash_attention,
                          c.tp_comm_overlap, 4 if c.param_bytes == 4 else 2)

    @property
    def layer_params(self) -> float:
        """Parameters of one decoder layer on one GPU (TP-split matrices, replicated norms)."""
        return layer_params_per_gpu(self.model, self.dims.tp)

    def recomputes(self, position: int) -> str | None:
        """What is recomputed before the backward of the layer at `position` within its model chunk: 'full' (its
        forward: uniform, every layer; block, the first recompute_num_layers), 'selective' (core attention) or
        None."""
        c = self.config
        if c.recompute_granularity == "full":
            uniform = c.recompute_method == "uniform" or position < (c.recompute_num_layers or 0)
            return "full" if uniform else None
        return c.recompute_granularity

    def layers_of(self, rank: int, chunk: int) -> tuple[int, ...]:
        return self.stage_layers[rank][chunk]

    def has_embedding(self, rank: int, chunk: int) -> bool:
        return rank == 0 and chunk == 0

    def has_output(self, rank: int, chunk: int) -> bool:
        return rank == self.dims.pp - 1 and chunk == self.chunks - 1

    def pass_parts(self, rank: int, chunk: int, phase: str) -> tuple[tuple[int, str, str], ...]:
        """What a forward ('F') or backward ('B') pass of model chunk `chunk` on pipeline rank `rank` runs, in order:
        (layer, program, phase) with layer -1 the embedding and -2 the output layer. Forward: the embedding (first
        virtual stage), the chunk's layers, the output layer and loss (last virtual stage); backward in reverse,
        each recomputed layer's forward (full) or core attention (selective) right before its backward."""
        layers, out = self.layers_of(rank, chunk), []
        if phase == "F":
            if self.has_embedding(rank, chunk):
                out.append((-1, "embedding.forward", "forward"))
            out += [(i, "layer.forward", "forward") for i in layers]
            if self.has_output(rank, chunk):
                out.append((-2, "output.forward", "forward"))
            return tuple(out)
        if self.has_output(rank, chunk):
            out.append((-2, "output.backward", "backward"))
        for pos in reversed(range(len(layers))):
            rerun = self.recomputes(pos)
            if rerun:
                out.append((layers[pos], "layer.recompute" if rerun == "full" else "layer.selective", "recompute"))
            out.append((layers[pos], "layer.backward", "backward"))
        if self.has_embedding(rank, chunk):
            out.append((-1, "embedding.backward", "backward"))
        return tuple(out)

    def describe(self) -> str:
        c = self.config
        v = f" v={self.chunks}" if self.chunks > 1 else ""
        return (f"tp={self.dims.tp} pp={self.dims.pp} cp={self.dims.cp} dp={self.dims.dp}{v} "
                f"mbs={c.micro_batch_size} m={self.microbatches} {self.schedule_name} zero={c.stage} "
                f"recompute={c.recompute_granularity or 'none'}{' sp' if c.sp else ''}")


def build_layout(model: TransformerConfig, config: TrainingConfig, world_size: int) -> Layout:
    """Validate `config` against the model and `world_size` ranks (Megatron's rules) and derive the layout."""
    c = config
    tp, pp, cp = c.tensor_model_parallel_size, c.pipeline_model_parallel_size, c.context_parallel_size
    try:
        dims = ParallelDims(tp=tp, pp=pp, cp=cp, world_size=c.world_size or world_size)
    except LayoutError as exc:
        raise ConfigError(str(exc), "tensor_model_parallel_size") from None
    if dims.world_size > world_size:
        raise ConfigError(f"world_size {dims.world_size} is more than the cluster's {world_size} ranks",
                          "world_size")
    _check_splits(model, c, dims)
    m = c.global_batch_size // (c.micro_batch_size * dims.dp)
    chunks, layers = _assign_layers(model, c, pp)
    name = _schedule_name(c, chunks, pp)
    passes = 2 * m * chunks * pp
    if passes > MAX_PASSES:
        raise ConfigError(f"global_batch_size {c.global_batch_size} makes {m:,} micro-batches per pipeline, "
                          f"{passes:,} forward and backward passes per step: more than the {MAX_PASSES:,} simcomm "
                          f"simulates (raise micro_batch_size or lower global_batch_size)", "global_batch_size")
    if c.recompute_granularity == "full" and c.recompute_method == "block" and not c.recompute_num_layers:
        raise ConfigError("recompute_method block needs recompute_num_layers", "recompute_num_layers")
    try:
        sched = _schedule(name, pp, m, chunks, c.microbatch_group_size_per_vp_stage)
    except SimcommError as exc:
        raise ConfigError(str(exc), "global_batch_size") from None
    return Layout(c, model, dims, m, chunks, name, layers, sched)


def _check_splits(model: TransformerConfig, c: TrainingConfig, dims: ParallelDims) -> None:
    """Megatron's divisibility rules: what TP, CP and DP cut must cut evenly."""
    tp, cp = dims.tp, dims.cp
    for what, n in (("num_attention_heads", model.num_attention_heads), ("num_query_groups", model.num_query_groups),
                    ("ffn_hidden_size", model.ffn_hidden_size), ("padded_vocab_size", model.padded_vocab_size)):
        if n % tp:
            raise ConfigError(f"{what} ({n}) is not divisible by tensor_model_parallel_size ({tp})",
                              "tensor_model_parallel_size")
    if cp > 1 and model.seq_length % (2 * cp):
        raise ConfigError(f"seq_length ({model.seq_length}) must divide into 2 x context_parallel_size = {2 * cp} "
                          "chunks (causal load balancing)", "context_parallel_size")
    if c.sp and (model.seq_length // cp) % tp:
        raise ConfigError(f"with sequence_parallel the sequence per context-parallel rank "
                          f"({model.seq_length // cp}) must be divisible by tensor_model_parallel_size ({tp})",
                          "sequence_parallel")
    if c.global_batch_size % (c.micro_batch_size * dims.dp):
        raise ConfigError(f"global_batch_size ({c.global_batch_size}) is not divisible by micro_batch_size "
                          f"({c.micro_batch_size}) x data-parallel size ({dims.dp})", "global_batch_size")


def _schedule_name(c: TrainingConfig, chunks: int, pp: int) -> str:
    name = c.pipeline_schedule
    if name == "auto":
        name = "interleaved_1f1b" if chunks > 1 else "1f1b"
    if name == "interleaved_1f1b" and chunks == 1:
        raise ConfigError("pipeline_schedule interleaved_1f1b needs num_layers_per_virtual_pipeline_stage",
                          "pipeline_schedule")
    if name != "interleaved_1f1b" and chunks > 1:
        raise ConfigError(f"pipeline_schedule {name} runs one model chunk per stage; "
                          "num_layers_per_virtual_pipeline_stage needs interleaved_1f1b", "pipeline_schedule")
    if name == "interleaved_1f1b" and pp < 2:
        raise ConfigError("the interleaved schedule needs pipeline_model_parallel_size >= 2",
                          "pipeline_model_parallel_size")
    return name


@lru_cache(maxsize=32)
def _schedule(name: str, pp: int, m: int, chunks: int, group_size: int | None):
    """The schedule's actions per rank; shared by the layouts that have the same one (a layout search builds
    thousands whose ZeRO stage or recomputation differ), so read-only."""
    if name == "interleaved_1f1b":
        return interleaved_1f1b(pp, m, chunks, group_size)
    return make_schedule(name, pp, m, 1)


def _assign_layers(model: TransformerConfig, c: TrainingConfig, pp: int):
    """(v, [rank][chunk] -> layer indices): Megatron's pipeline split of the decoder layers (virtual stage
    chunk * p + rank holds the chunk-th run of consecutive layers on that rank)."""
    L = model.num_layers
    emb, loss = int(c.account_for_embedding_in_pipeline_split), int(c.account_for_loss_in_pipeline_split)
    first, last = c.decoder_first_pipeline_num_layers, c.decoder_last_pipeline_num_layers
    if (first is not None or last is not None) and (emb or loss):
        raise ConfigError("decoder_first/last_pipeline_num_layers and account_for_*_in_pipeline_split are "
                          "exclusive", "decoder_first_pipeline_num_layers")
    if first is not None or last is not None:
        if c.num_layers_per_virtual_pipeline_stage or c.virtual_pipeline_model_parallel_size:
            raise ConfigError("decoder_first/last_pipeline_num_layers are supported here without virtual stages",
                              "decoder_first_pipeline_num_layers")
        counts = _uneven(L, pp, first, last)
        starts = [sum(counts[:r]) for r in range(pp)]
        return 1, tuple((tuple(range(starts[r], starts[r] + counts[r])),) for r in range(pp))
    slots = L + emb + loss
    if slots % pp:
        extra = (" + embedding" if emb else "") + (" + loss" if loss else "")
        raise ConfigError(f"num_layers ({L}{extra + f' = {slots}' if extra else ''}) is not divisible by "
                          f"pipeline_model_parallel_size ({pp})", "pipeline_model_parallel_size")
    per_stage = slots // pp
    v = _virtual_stages(c, per_stage, pp)
    per_vs = per_stage // v
    if (emb or loss) and per_vs <= 1 and pp * v > 1:
        raise ConfigError("a virtual stage that holds only the embedding or the loss has no decoder layers",
                          "num_layers_per_virtual_pipeline_stage")
    out, nxt = [[None] * v for _ in range(pp)], 0
    for chunk in range(v):
        for rank in range(pp):
            vs = chunk * pp + rank
            n = per_vs - (emb if vs == 0 else 0) - (loss if vs == pp * v - 1 else 0)
            out[rank][chunk] = tuple(range(nxt, nxt + n))
            nxt += n
    return v, tuple(tuple(r) for r in out)


def _virtual_stages(c: TrainingConfig, per_stage: int, pp: int) -> int:
    """v, the model chunks per pipeline rank: layers per stage / num_layers_per_virtual_pipeline_stage, or
    virtual_pipeline_model_parallel_size; either must divide the stage's layers."""
    n, v = c.num_layers_per_virtual_pipeline_stage, c.virtual_pipeline_model_parallel_size
    if n and per_stage % n:
        raise ConfigError(f"num_layers_per_virtual_pipeline_stage ({n}) must divide the layers per pipeline "
                          f"stage ({per_stage})", "num_layers_per_virtual_pipeline_stage")
    if v and per_stage % v:
        raise ConfigError(f"virtual_pipeline_model_parallel_size ({v}) must divide the layers per pipeline "
                          f"stage ({per_stage})", "virtual_pipeline_model_parallel_size")
    if v and v > 1 and pp == 1:
        raise ConfigError("virtual_pipeline_model_parallel_size > 1 needs pipeline_model_parallel_size > 1",
                          "virtual_pipeline_model_parallel_size")
    return per_stage // n if n else (v or 1)


def _uneven(L: int, pp: int, first: int | None, last: int | None) -> list[int]:
    if pp == 1:
        raise ConfigError("decoder_first/last_pipeline_num_layers need pipeline_model_parallel_size > 1",
                          "pipeline_model_parallel_size")
    fixed = [x for x in (first, last) if x is not None]
    middle_ranks = pp - len(fixed)
    rest = L - sum(fixed)
    if middle_ranks == 0:
        if rest:
            raise ConfigError(f"decoder_first/last_pipeline_num_layers ({first}, {last}) do not add up to "
                              f"num_layers ({L})", "decoder_first_pipeline_num_layers")
        return [first, last]
    if rest < middle_ranks or rest % middle_ranks:
        raise ConfigError(f"the {rest} layers left after decoder_first/last_pipeline_num_layers do not divide "
                          f"evenly over the other {middle_ranks} pipeline stages", "decoder_first_pipeline_num_layers")
    per = rest // middle_ranks
    return [first if first is not None else per] + [per] * (pp - 2) + [last if last is not None else per]


__all__ = ["Layout", "build_layout"]
