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

from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

from ..errors import SimcommError
from .config import ConfigError, TrainingConfig
from .data_parallel.sharding import Sharding, sharding
from .dims import LayoutError, ParallelDims
from .model.config import TransformerConfig
from .model.flops import expert_params, layer_params_per_gpu
from .model.layer import LayerShape
from .model.moe.balance import routing_shares
from .pipeline_parallel import timeline
from .pipeline_parallel.actions import Placement
from .pipeline_parallel.schedules import SCHEDULES
from .pipeline_parallel.schedules import schedule as make_schedule

# Both executions run a step piece by piece: each micro-batch's pass through each model chunk, cut with ZeRO-3
# where each layer waits for its gathered parameters (the step model simulates each piece at about a millisecond;
# numeric training computes it), and each layer of each pass (tens of microseconds of bookkeeping). A step of more
# would run for minutes to hours (global_batch_size 10**8 on one pipeline: about 15 hours), so it is refused,
# naming these bounds (each about a minute).
MAX_PIPELINE_PASSES = 1 << 16
MAX_LAYER_PASSES = 1 << 20


# The templates a backward pass runs: whole (B), or split into its input (I) and weight (W) gradients.
BACKWARD_PROGRAMS = {"B": "backward", "I": "backward_input", "W": "backward_weight"}


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

    @cached_property  # asked for per layer and pass (has_embedding, has_output)
    def placement(self) -> Placement:
        """Which model stage each (pipeline rank, chunk) holds (the schedule's: loop, V or DualPipe's two ways)."""
        return SCHEDULES[self.schedule_name].placement(self.dims.pp, self.chunks)

    @property
    def schedule_key(self) -> tuple:
        """What the schedule (its actions per rank) depends on: layouts with the same key share one."""
        return (self.schedule_name, self.dims.pp, self.microbatches, self.chunks,
                self.config.microbatch_group_size_per_vp_stage)

    @property
    def virtual_stages(self) -> int:
        return self.placement.stages

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

    @cached_property  # asked for per rank, chunk and layer (memory, passes, caches keyed by it)
    def layer_shape(self) -> LayerShape:
        """One decoder layer on one GPU, one micro-batch: what its kernels, FLOPs and saved tensors depend on."""
        c = self.config
        return LayerShape(self.model, self.dims.tp, self.dims.cp, c.sp, c.micro_batch_size, c.flash_attention,
                          c.tp_comm_overlap, 4 if c.param_bytes == 4 else 2,
                          recompute_modules=c.recompute_modules or ("core_attn",))

    @cached_property
    def moe_layer_shape(self) -> LayerShape | None:
        """An MoE layer on one GPU, one micro-batch (None for a dense model): the layer shape with the expert grid,
        the routing the step model is given (moe_routing_skew or moe_expert_load; balanced without) and the GEMMs."""
        m, c = self.model, self.config
        if not m.is_moe:
            return None
        shares = ()
        if c.moe_routing_skew or c.moe_expert_load is not None:
            shares = tuple(float(x) for x in routing_shares(m.num_moe_experts, c.moe_routing_skew, c.moe_expert_load))
        return replace(self.layer_shape, moe=True, ep=self.dims.ep, etp=self.dims.etp, routing=shares,
                       grouped_gemm=c.moe_grouped_gemm, dispatcher=c.moe_token_dispatcher_type,
                       dispatch_fp8=c.moe_dispatch_fp8, deepep_sms=c.moe_deepep_num_sms,
                       shared_expert_overlap=c.moe_shared_expert_overlap)

    def shape_of(self, layer: int) -> LayerShape:
        return self.moe_layer_shape if self.model.moe_layers[layer] else self.layer_shape

    @property
    def layer_params(self) -> float:
        """Parameters of one dense decoder layer on one GPU (TP-split matrices, replicated norms)."""
        return layer_params_per_gpu(self.model, self.dims.tp)

    def params_of(self, layer: int) -> float:
        """Parameters of decoder layer `layer` on one GPU (an MoE layer's experts split over EP x ETP)."""
        if not self.model.moe_layers[layer]:
            return self.layer_params
        return layer_params_per_gpu(self.model, self.dims.tp, True, self.dims.ep, self.dims.etp)

    def expert_params_of(self, layer: int) -> float:
        """The routed experts' parameters of layer `layer` on one GPU (reduced over the expert-data-parallel
        group; 0 for a dense layer)."""
        return expert_params(self.model) / (self.dims.ep * self.dims.etp) if self.model.moe_layers[layer] else 0.0

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

    def moe_pattern(self, rank: int, chunk: int) -> tuple[bool, ...] | int:
        """Which of the chunk's layers are MoE: what a pass's cost and memory depend on, not which layers they are
        (a cache key); a dense model's, how many layers (all dense)."""
        layers = self.stage_layers[rank][chunk]
        if not self.model.is_moe:
            return len(layers)
        moe = self.model.moe_layers
        return tuple(moe[i] for i in layers)

    def has_embedding(self, rank: int, chunk: int) -> bool:
        return self.placement.stage(rank, chunk) == 0

    def has_output(self, rank: int, chunk: int) -> bool:
        return self.placement.stage(rank, chunk) == self.virtual_stages - 1

    def pass_parts(self, rank: int, chunk: int, phase: str) -> tuple[tuple[int, str, str], ...]:
        """What a forward ('F'), backward ('B') or split-backward ('I' input, 'W' weight) pass of model chunk
        `chunk` on pipeline rank `rank` runs, in order: (layer, program, phase) with layer -1 the embedding and -2
        the output layer. Forward: the embedding (first virtual stage), the chunk's layers, the output layer and
        loss (last virtual stage); backward in reverse, each recomputed layer's forward (full) or core attention
        (selective) right before the input gradient needs it (B or I, never W)."""
        layers, out = self.layers_of(rank, chunk), []
        if phase == "F":
            if self.has_embedding(rank, chunk):
                out.append((-1, "embedding.forward", "forward"))
            out += [(i, "layer.forward", "forward") for i in layers]
            if self.has_output(rank, chunk):
                out.append((-2, "output.forward", "forward"))
            return tuple(out)
        program = BACKWARD_PROGRAMS[phase]
        if self.has_output(rank, chunk):
            out.append((-2, f"output.{program}", "backward"))
        for pos in reversed(range(len(layers))):
            rerun = self.recomputes(pos) if phase != "W" else None
            if rerun:
                out.append((layers[pos], "layer.recompute" if rerun == "full" else "layer.selective", "recompute"))
            out.append((layers[pos], f"layer.{program}", "backward"))
        if self.has_embedding(rank, chunk):
            out.append((-1, f"embedding.{program}", "backward"))
        return tuple(out)

    def describe(self) -> str:
        c = self.config
        v = f" v={self.chunks}" if self.chunks > 1 else ""
        d = self.dims
        experts = f" ep={d.ep} etp={d.etp} edp={d.edp}" if self.model.is_moe else ""
        return (f"tp={self.dims.tp} pp={self.dims.pp} cp={self.dims.cp} dp={self.dims.dp}{experts}{v} "
                f"mbs={c.micro_batch_size} m={self.microbatches} {self.schedule_name} zero={c.stage} "
                f"recompute={c.recompute_granularity or 'none'}{' sp' if c.sp else ''}")


def build_layout(model: TransformerConfig, config: TrainingConfig, world_size: int,
                 check_schedule: bool = True) -> Layout:
    """Validate `config` against the model and `world_size` ranks (Megatron's rules) and derive the layout.
    check_schedule=False leaves its schedule unchecked (timeline.check): only for a layout that is not run, whose
    schedule is read for its memory alone (the plan's screening of thousands); a run (the step model, numeric
    training, the plan's bounds) takes a checked one, as a layout built again with the default has."""
    c = config
    tp, pp, cp = c.tensor_model_parallel_size, c.pipeline_model_parallel_size, c.context_parallel_size
    try:
        dims = ParallelDims(tp=tp, pp=pp, cp=cp, world_size=c.world_size or world_size)
    except LayoutError as exc:
        raise ConfigError(str(exc), "tensor_model_parallel_size") from None
    if dims.world_size > world_size:
        raise ConfigError(f"world_size {dims.world_size} is more than the cluster's {world_size} ranks",
                          "world_size")
    _check_experts(model, c, dims)
    if (c.expert_model_parallel_size, c.etp) != (dims.ep, dims.etp):  # the expert grid differs from the default
        dims = ParallelDims(tp=tp, pp=pp, cp=cp, world_size=dims.world_size, ep=c.expert_model_parallel_size,
                            etp=c.etp)
    _check_splits(model, c, dims)
    m = c.global_batch_size // (c.micro_batch_size * dims.dp)
    name = _schedule_name(model, c, pp)
    chunks, layers = _assign_layers(model, c, pp, SCHEDULES[name])
    _check_schedule(name, pp)
    if "mla_up_proj" in (c.recompute_modules or ()) and not model.multi_latent_attention:
        raise ConfigError("recompute_modules mla_up_proj needs a model with multi_latent_attention",
                          "recompute_modules")
    if c.overlap_moe_expert_parallel_comm and name not in ("dualpipe", "dualpipev"):
        raise ConfigError("overlap_moe_expert_parallel_comm is modelled for DualPipe's overlapped pairs "
                          "(pipeline_schedule dualpipe or dualpipev); Megatron-LM's 1F1B form is not",
                          "overlap_moe_expert_parallel_comm")
    _check_work(m, chunks, pp, model, c)
    if c.recompute_granularity == "full" and c.recompute_method == "block" and not c.recompute_num_layers:
        raise ConfigError("recompute_method block needs recompute_num_layers", "recompute_num_layers")
    try:
        sched = _schedule(name, pp, m, chunks, c.microbatch_group_size_per_vp_stage, check_schedule)
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


def _check_work(m: int, chunks: int, pp: int, model: TransformerConfig, c: TrainingConfig) -> None:
    """A step's pieces (micro-batches x chunks x stages, x the layers of a chunk with ZeRO-3) are at most
    MAX_PIPELINE_PASSES, and its layer passes (micro-batches x layers) at most MAX_LAYER_PASSES."""
    layers = model.num_layers
    per_chunk = -(-layers // (chunks * pp)) if c.stage == 3 else 1
    pieces, layer_passes = m * chunks * pp * per_chunk, m * layers
    cut = f" x {per_chunk:,} layers a chunk (ZeRO-3 gathers each layer's parameters)" if per_chunk > 1 else ""
    what = "pass pieces" if cut else "forward passes"
    steps = f"{m:,} micro-batch{'es' if m > 1 else ''} per pipeline"
    field, value = ("global_batch_size", c.global_batch_size) if m > 1 else ("num_layers", layers)
    hint = ("a smaller global_batch_size, or a larger micro_batch_size or data-parallel size, gives fewer"
            if m > 1 else "fewer layers" + (", or a ZeRO stage below 3," if per_chunk > 1 else "") + " give fewer")
    if pieces > MAX_PIPELINE_PASSES:
        raise ConfigError(f"{field} ({value:,}) makes {steps} x {chunks} model "
                          f"chunk{'s' if chunks > 1 else ''} x {pp} stage{'s' if pp > 1 else ''}{cut} = "
                          f"{pieces:,} {what} a step; simcomm runs each, and at most "
                          f"{MAX_PIPELINE_PASSES:,} a step (about a minute): {hint}", field)
    if layer_passes > MAX_LAYER_PASSES:
        raise ConfigError(f"{field} ({value:,}) makes {steps} x {layers:,} layers "
                          f"= {layer_passes:,} layer passes a step; simcomm runs each, and at most "
                          f"{MAX_LAYER_PASSES:,} a step (about a minute): {hint}", field)


def _check_experts(model: TransformerConfig, c: TrainingConfig, dims: ParallelDims) -> None:
    """Megatron-Core's rules for the expert grid and the MoE layers (moe.md section 2)."""
    ep, etp, tp = c.expert_model_parallel_size, c.etp, dims.tp
    if not model.is_moe:
        if ep > 1 or etp != tp:
            field = "expert_model_parallel_size" if ep > 1 else "expert_tensor_parallel_size"
            raise ConfigError(f"{field} needs a mixture-of-experts model (num_moe_experts)", field)
        return
    E = model.num_moe_experts
    if E % ep:
        raise ConfigError(f"num_moe_experts ({E}) is not divisible by expert_model_parallel_size ({ep})",
                          "expert_model_parallel_size")
    stage = dims.world_size // dims.pp
    if stage % (ep * etp):
        raise ConfigError(f"the {stage} GPUs of a pipeline stage are not divisible by expert_tensor_parallel_size x "
                          f"expert_model_parallel_size = {etp} x {ep}", "expert_model_parallel_size")
    for what, n, by, field in (("moe_ffn_hidden_size", model.moe_ffn_hidden_size, etp, "expert_tensor_parallel_size"),
                               ("moe_shared_expert_intermediate_size", model.moe_shared_expert_intermediate_size, tp,
                                "tensor_model_parallel_size")):
        if n is not None and n % by:
            raise ConfigError(f"{what} ({n}) is not divisible by {field} ({by})", field)
    if tp > 1 and not c.sequence_parallel:
        raise ConfigError("MoE layers with tensor parallelism need sequence_parallel (Megatron-Core's rule: tokens "
                          "enter the router split along the sequence)", "sequence_parallel")
    _check_dispatcher(c, etp)
    if c.stage == 3:
        raise ConfigError("ZeRO-3 with mixture-of-experts layers is not modelled (expert parameters would be sharded "
                          "over their own expert-data-parallel group)", "zero_stage")
    if c.moe_expert_load is not None and len(c.moe_expert_load) != E:
        raise ConfigError(f"moe_expert_load gives {len(c.moe_expert_load)} loads for {E} experts",
                          "moe_expert_load")


def _check_dispatcher(c: TrainingConfig, etp: int) -> None:
    """The dispatchers and their switches modelled: alltoall, and flex with DeepEP."""
    kind = c.moe_token_dispatcher_type
    if kind == "allgather":
        raise ConfigError("moe_token_dispatcher_type allgather is not modelled; alltoall and flex (DeepEP) are",
                          "moe_token_dispatcher_type")
    if kind == "flex" and c.moe_flex_dispatcher_backend != "deepep":
        raise ConfigError(f"moe_flex_dispatcher_backend {c.moe_flex_dispatcher_backend!r} is not modelled; deepep "
                          "is", "moe_flex_dispatcher_backend")
    if kind == "flex" and etp > 1:
        raise ConfigError("the flex dispatcher (DeepEP) is modelled with expert_tensor_parallel_size 1",
                          "expert_tensor_parallel_size")
    if c.moe_dispatch_fp8 and (kind != "flex" or c.fp8_format is None):
        raise ConfigError("moe_dispatch_fp8 needs moe_token_dispatcher_type flex and fp8_format (FP8 rows are "
                          "DeepEP's, from FP8 GEMMs)", "moe_dispatch_fp8")


def _schedule_name(model: TransformerConfig, c: TrainingConfig, pp: int) -> str:
    """The schedule's canonical name (auto: interleaved 1F1B with virtual stages, else 1F1B)."""
    name = c.pipeline_schedule
    if name == "auto":
        per_stage = (model.num_layers + c.account_for_embedding_in_pipeline_split +
                     c.account_for_loss_in_pipeline_split) // pp
        n, v = c.num_layers_per_virtual_pipeline_stage, c.virtual_pipeline_model_parallel_size
        name = "interleaved_1f1b" if (v or 1) > 1 or n and n < per_stage else "1f1b"
    return name


def _check_schedule(name: str, pp: int) -> None:
    spec = SCHEDULES[name]
    if pp < 2 and (spec.chunks == "two" or name == "interleaved_1f1b"):
        which = "interleaved schedule" if name == "interleaved_1f1b" else f"{name} schedule"
        raise ConfigError(f"the {which} needs pipeline_model_parallel_size >= 2", "pipeline_model_parallel_size")
    if spec.even_pp and pp % 2:
        raise ConfigError(f"the {name} schedule needs an even pipeline_model_parallel_size, got {pp}",
                          "pipeline_model_parallel_size")


_CHECKED: set = set()  # the schedules this process has checked (timeline.check): a few hundred small keys


def _schedule(name: str, pp: int, m: int, chunks: int, group_size: int | None, check: bool):
    """The schedule's actions per rank, checked (timeline.check) once per process when `check`."""
    key = (name, pp, m, chunks, group_size)
    sched = _built(*key)
    if check and key not in _CHECKED:
        timeline.check(sched, SCHEDULES[name].placement(pp, chunks))
        _CHECKED.add(key)
    return sched


@lru_cache(maxsize=32)
def _built(name: str, pp: int, m: int, chunks: int, group_size: int | None):
    """A schedule, shared by the layouts that have the same one (a layout search builds thousands whose ZeRO stage
    or recomputation differ), so read-only."""
    return make_schedule(name, pp, m, chunks, group_size, check=False)


def _assign_layers(model: TransformerConfig, c: TrainingConfig, pp: int, spec):
    """(v, [rank][chunk] -> layer indices): Megatron's pipeline split of the decoder layers, stage s holding the
    s-th run of consecutive layers; the schedule's placement says which stage each (rank, chunk) holds (virtual
    stage chunk * p + rank in Megatron's; V and DualPipe's in actions.py)."""
    L = model.num_layers
    emb, loss = int(c.account_for_embedding_in_pipeline_split), int(c.account_for_loss_in_pipeline_split)
    first, last = c.decoder_first_pipeline_num_layers, c.decoder_last_pipeline_num_layers
    if (first is not None or last is not None) and (emb or loss):
        raise ConfigError("decoder_first/last_pipeline_num_layers and account_for_*_in_pipeline_split are "
                          "exclusive", "decoder_first_pipeline_num_layers")
    if first is not None or last is not None:
        dual = spec.style == "dual"  # DualPipe: two chunks, but pp stages (each held twice)
        if c.num_layers_per_virtual_pipeline_stage or c.virtual_pipeline_model_parallel_size or \
                spec.chunks == "two" and not dual:
            raise ConfigError("decoder_first/last_pipeline_num_layers are supported here without virtual stages "
                              "(and with DualPipe)", "decoder_first_pipeline_num_layers")
        counts = _uneven(L, pp, first, last)
        starts = [sum(counts[:r]) for r in range(pp)]
        runs = [tuple(range(starts[r], starts[r] + counts[r])) for r in range(pp)]
        if dual:
            placement = spec.placement(pp, 2)
            return 2, tuple(tuple(runs[placement.stage(r, ch)] for ch in range(2)) for r in range(pp))
        return 1, tuple((run,) for run in runs)
    slots = L + emb + loss
    if slots % pp:
        extra = (" + embedding" if emb else "") + (" + loss" if loss else "")
        raise ConfigError(f"num_layers ({L}{extra + f' = {slots}' if extra else ''}) is not divisible by "
                          f"pipeline_model_parallel_size ({pp})", "pipeline_model_parallel_size")
    per_stage = slots // pp
    v = _virtual_stages(c, per_stage, pp, spec)
    placement = spec.placement(pp, v)
    per_vs = slots // placement.stages
    if (emb or loss) and per_vs <= 1 and placement.stages > 1:
        raise ConfigError("a virtual stage that holds only the embedding or the loss has no decoder layers",
                          "num_layers_per_virtual_pipeline_stage")
    runs, nxt = [], 0
    for vs in range(placement.stages):
        n = per_vs - (emb if vs == 0 else 0) - (loss if vs == placement.stages - 1 else 0)
        runs.append(tuple(range(nxt, nxt + n)))
        nxt += n
    return v, tuple(tuple(runs[placement.stage(r, ch)] for ch in range(v)) for r in range(pp))


def _virtual_stages(c: TrainingConfig, per_stage: int, pp: int, spec) -> int:
    """v, the model chunks per pipeline rank: layers per stage / num_layers_per_virtual_pipeline_stage, or
    virtual_pipeline_model_parallel_size; either must divide the stage's layers. The V-shaped schedules and
    DualPipe hold two chunks (DualPipe: two whole stages), the others what the schedule allows."""
    n, v = c.num_layers_per_virtual_pipeline_stage, c.virtual_pipeline_model_parallel_size
    if spec.chunks == "two":
        given = per_stage // n if n and not per_stage % n else v
        if given not in (None, 2):
            raise ConfigError(f"pipeline_schedule {spec.name} runs two model chunks per rank; the virtual pipeline "
                              f"settings give {given}", "pipeline_schedule")
        if spec.style == "v" and per_stage % 2:
            raise ConfigError(f"pipeline_schedule {spec.name} splits each rank's layers in two chunks; "
                              f"{per_stage} layers per stage do not split", "pipeline_schedule")
        return 2
    if n and per_stage % n:
        raise ConfigError(f"num_layers_per_virtual_pipeline_stage ({n}) must divide the layers per pipeline "
                          f"stage ({per_stage})", "num_layers_per_virtual_pipeline_stage")
    if v and per_stage % v:
        raise ConfigError(f"virtual_pipeline_model_parallel_size ({v}) must divide the layers per pipeline "
                          f"stage ({per_stage})", "virtual_pipeline_model_parallel_size")
    if v and v > 1 and pp == 1:
        raise ConfigError("virtual_pipeline_model_parallel_size > 1 needs pipeline_model_parallel_size > 1",
                          "virtual_pipeline_model_parallel_size")
    got = per_stage // n if n else (v or 1)
    if spec.chunks == "one" and got > 1:
        raise ConfigError(f"pipeline_schedule {spec.name} runs one model chunk per stage; "
                          "num_layers_per_virtual_pipeline_stage needs interleaved_1f1b (or looped_bfs, "
                          "interleaved_zb)", "pipeline_schedule")
    if spec.name == "interleaved_1f1b" and got == 1:
        raise ConfigError("pipeline_schedule interleaved_1f1b needs num_layers_per_virtual_pipeline_stage",
                          "pipeline_schedule")
    return got


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


__all__ = ["MAX_LAYER_PASSES", "MAX_PIPELINE_PASSES", "Layout", "build_layout"]
