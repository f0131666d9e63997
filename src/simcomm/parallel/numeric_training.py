"""Numeric training: the rank program that trains the numeric GPT with every parallelism composed, tp x cp x dp x pp
on one rank grid (ParallelDims, Megatron's order), from the same Layout the step model costs (layout.py).

Each rank builds its share of the model: the virtual pipeline stages it holds (GPTChunks), each with tensor-
parallel mappings over its TP group, ring attention over its CP group, and a data-parallel store (DDP or ZeRO-1/2/3)
over its data-parallel group, which Megatron widens to dp x cp (context-parallel ranks hold the same weights and
see different tokens). A step runs the pipeline schedule, then finishes the gradient reductions, all-reduces
the sequence-parallel gradients over TP and the tied embedding over the first and last stage, and steps the
optimizer.

    layout = build_layout(model, TrainingConfig(...), world_size=8)
    result = simcomm.spawn(train, args=(layout,), nprocs=layout.world_size)   # on the simulator
    compare(train_with, (layout,), nprocs=layout.world_size)                  # and against real gloo
"""
from __future__ import annotations

import numpy as np

from . import data
from .config import ConfigError, TrainingConfig
from .context_parallel import RingAttention, load_balanced_positions
from .data_parallel import make_store
from .data_parallel.reduce import add_held, all_reduce_held
from .dims import Axis, LayoutError
from .expert_parallel import ExpertParallel
from .expert_parallel.store import ExpertStores
from .layout import Layout, build_layout
from .model.flops import parameter_count
from .model.gpt import WORD, ChunkContext, GPTChunk, NoTensorParallel, init_params, local_shape, param_specs, shard
from .model.moe.balance import routing_shares, updated_expert_bias
from .model.tensor import Meta, is_meta, value
from .numeric_compute import KernelCharges
from .pipeline_parallel.p2p import StageLinks
from .pipeline_parallel.runner import PipelineRunner
from .rank_comm import RankComm
from .serial import expert_biases
from .tensor_parallel import TensorParallel


# Numeric training with data holds real arrays in this host's memory: every rank initialises the whole model (then
# keeps its shard, its gradients and optimizer state) and draws the whole batch. Past this bound (a few times a
# tutorial model's) a layout is refused rather than left to exhaust the host.
MAX_HOST_BYTES = 4 << 30


def check_host_memory(layout: Layout) -> None:
    """Refuse a numeric run with data whose arrays (at the least: the model and its gradients and Adam moments,
    and the token batch, on every rank) exceed MAX_HOST_BYTES, naming the field that makes them large."""
    cfg, m = layout.config, layout.model
    if cfg.size_only:
        return
    ranks = layout.world_size
    weights = ranks * 4 * parameter_count(m) * cfg.numpy_dtype.itemsize
    tokens = ranks * 2 * cfg.global_batch_size * m.seq_length * 8
    if weights + tokens > MAX_HOST_BYTES:
        field = "hidden_size" if weights >= tokens else "global_batch_size"
        raise ConfigError(f"numeric training with data holds at least {(weights + tokens) / (1 << 30):,.1f} GiB "
                          f"on this host ({ranks} ranks x the model's {parameter_count(m):,} parameters with their "
                          f"gradients and optimizer state, and the batch's {cfg.global_batch_size:,} x "
                          f"{m.seq_length:,} tokens), more than {MAX_HOST_BYTES >> 30} GiB: a smaller {field}, or "
                          "size_only: true (the same communication and time without data)", field)


class RankGroups:
    """Every process group of the layout, created on every rank in the same order; this rank's ones kept."""

    def __init__(self, comm: RankComm, layout: Layout, rank: int):
        dims = layout.dims
        self.ranks: dict[str, list[int]] = {}
        self.groups: dict[str, object] = {}
        layouts = {a.value: dims.groups(a) for a in (Axis.TP, Axis.CP, Axis.DP, Axis.PP)}
        # the gradient-reduction group: dp x cp ranks with the same (pp, tp)
        layouts["dp_cp"] = dims.groups(Axis.DP, Axis.CP)
        if layout.model.is_moe:  # the expert grid; the ranks sharing a micro-batch's tokens; a stage's ranks
            layouts.update({a.value: dims.groups(a) for a in (Axis.EP, Axis.ETP, Axis.EDP)})
            layouts["tp_cp"] = dims.groups(Axis.TP, Axis.CP)
            layouts["stage"] = dims.groups(Axis.TP, Axis.CP, Axis.DP)
        ends = sorted({r for r in range(dims.pp) for c in range(layout.chunks)
                       if layout.has_embedding(r, c) or layout.has_output(r, c)})
        if len(ends) == 2 and layout.placement.style == "loop" and not layout.model.untie_embeddings_and_output_weights:
            layouts["embedding"] = np.stack([dims.ranks(pp=r).reshape(-1) for r in ends], axis=1)
        if layout.placement.style == "dual":  # DualPipe: pipeline ranks r and p - 1 - r hold the same two stages
            layouts["mirror"] = np.concatenate([np.stack([dims.ranks(pp=r).reshape(-1),
                                                          dims.ranks(pp=dims.pp - 1 - r).reshape(-1)], axis=1)
                                                for r in range(dims.pp // 2)])
        for name, rows in layouts.items():
            for row in rows:
                members = [int(r) for r in row]
                g = comm.new_group(members) if len(members) > 1 else None
                if rank in members:
                    self.ranks[name], self.groups[name] = members, g

    def size(self, name: str) -> int:
        return len(self.ranks.get(name, [0]))

    def index(self, name: str, rank: int) -> int:
        return self.ranks[name].index(rank) if name in self.ranks else 0


class RankTrainer:
    """One rank's model chunks, stores and pipeline runner."""

    def __init__(self, comm: RankComm, layout: Layout):
        if comm.world_size != layout.world_size:
            raise LayoutError(f"the layout {layout.dims.describe()} needs {layout.world_size} ranks; the job has "
                              f"{comm.world_size}")
        check_host_memory(layout)
        cfg, dims, m = layout.config, layout.dims, layout.model
        if m.is_moe and cfg.moe_token_dispatcher_type != "alltoall":
            raise ConfigError("numeric training runs Megatron-Core's alltoall token dispatcher; the flex dispatcher "
                              "(DeepEP) is modelled in the step model only", "moe_token_dispatcher_type")
        self.comm, self.layout, self.cfg = comm, layout, cfg
        rank = comm.rank
        self.coords = {a.value: i for a, i in dims.coords(rank).items()}
        self.groups = g = RankGroups(comm, layout, rank)
        t, c = dims.tp, dims.cp
        self.tp = TensorParallel(comm, g.groups.get("tp"), t, self.coords["tp"], cfg.sequence_parallel) if t > 1 \
            else NoTensorParallel()
        self.positions = load_balanced_positions(m.seq_length, c, self.coords["cp"])
        if comm.simulated:
            comm.kernels = KernelCharges(layout, comm.device())
        self.attention = RingAttention(comm, g.ranks["cp"], self.coords["cp"], m.seq_length, comm.fl,
                                       self._charge) if c > 1 else None
        self.expert_coords = {a.value: i for a, i in dims.expert_coords(rank).items()}
        self._experts()
        self.specs = param_specs(m)
        self.dtype = cfg.numpy_dtype  # bfloat16 (size-only runs only) is held as float16: same bytes
        full = None if cfg.size_only else init_params(m, cfg.seed, self.dtype)
        self.chunks, self.stores = [], []
        for chunk in range(layout.chunks):
            model, store = self._chunk(chunk, full)
            self.chunks.append(model)
            self.stores.append(store)
        self.links = StageLinks(comm, g.ranks["pp"], self.coords["pp"])
        self.micro = cfg.micro_batch_size
        seq = m.seq_length // c // (t if cfg.sequence_parallel else 1)
        like = Meta((1,), self.dtype) if cfg.size_only else np.zeros(1, self.dtype)
        self.runner = PipelineRunner(comm, self.links, self.chunks, self.stores, (seq, self.micro, m.hidden_size),
                                     like, layout.placement)
        self.actions = layout.schedule[self.coords["pp"]]

    def _charge(self, name: str, share: float = 1.0) -> None:
        if self.comm.kernels is not None:
            self.comm.kernels.charge(name, share)

    def _charge_moe(self, name: str, counts=None) -> None:
        if self.comm.kernels is not None:
            self.comm.kernels.charge_moe(name, counts)

    def _experts(self) -> None:
        """What the MoE layers use: the expert-parallel exchanges (with EP or ETP > 1), the routing settings (the
        z-loss is a mean over this rank's tokens: scaled by 1 / (tp cp) so the ranks' terms add up to the
        micro-batch's, as Megatron scales it), the count reduction of the balancing losses over TP x CP, the
        expert biases and the counts that update them."""
        layout, comm, g, m = self.layout, self.comm, self.groups, self.layout.model
        dims, cfg = layout.dims, self.cfg
        self.experts = self.moe = self.reduce_counts = self.routing_shares = None
        self.expert_bias = expert_biases(m, self.cfg.numpy_dtype)
        self.routed = {i: np.zeros_like(b) for i, b in self.expert_bias.items()}
        if not m.is_moe:
            return
        if dims.ep * dims.etp > 1:
            self.experts = ExpertParallel(comm, m.num_moe_experts, g.groups.get("ep"), dims.ep,
                                          self.expert_coords["ep"], g.groups.get("etp"), dims.etp,
                                          self.expert_coords["etp"], self._charge_moe)
        shared = dims.tp * dims.cp
        self.moe = m
        if shared > 1 and m.moe_z_loss_coeff is not None:
            self.moe = m.with_overrides(moe_z_loss_coeff=m.moe_z_loss_coeff / shared)
        if shared > 1:
            def reduce_counts(counts, group=g.groups["tp_cp"]):
                with comm.tagged(axis="tp"):
                    return comm.all_reduce(counts, group)
            self.reduce_counts = reduce_counts
        if cfg.size_only and (cfg.moe_routing_skew or cfg.moe_expert_load is not None):
            self.routing_shares = routing_shares(m.num_moe_experts, cfg.moe_routing_skew, cfg.moe_expert_load)

    def _chunk(self, chunk: int, full: dict | None):
        """Model chunk `chunk` of this pipeline rank (the layers the layout gives it) and its parameter store."""
        layout, cfg, m, g = self.layout, self.cfg, self.layout.model, self.groups
        r = self.coords["pp"]
        ctx = ChunkContext(m, None, self.positions, self.tp, self.attention, self.comm.fl,
                           not m.untie_embeddings_and_output_weights, self.comm.kernels, self.experts, self.moe,
                           self.reduce_counts, self.expert_bias, self.routed, self.routing_shares)
        layers = layout.layers_of(r, chunk)
        model = GPTChunk(range(layers[0], layers[-1] + 1), layout.has_embedding(r, chunk),
                         layout.has_output(r, chunk), ctx)
        units = model.param_names()
        params = {n: self._local(n, full) for names in units.values() for n in names}
        experts = {u: [n for n in names if self.specs[n].expert] for u, names in units.items()}
        dense = {u: [n for n in names if not self.specs[n].expert] for u, names in units.items()}
        ctx.store = self._store("dp_cp", dense, params, {WORD} if self._tied_across_stages() else set())
        if any(experts.values()):
            ctx.store = ExpertStores(ctx.store, self._store("edp", experts, params, set()),
                                     [n for names in experts.values() for n in names])
        return model, ctx.store

    def _local(self, name: str, full: dict | None):
        """This rank's part of parameter `name`: its TP part, or for experts its EP rank's experts' ETP part."""
        spec, dims, tp, ep = self.specs[name], self.layout.dims, self.coords["tp"], 1
        t, e = (dims.etp, self.expert_coords["etp"]) if spec.expert else (dims.tp, tp)
        if spec.expert:
            ep = dims.ep
        if full is None:
            return Meta(local_shape(spec, t, ep), self.dtype)
        return shard(full[name], spec, t, e, ep, self.expert_coords["ep"])

    def _store(self, group: str, units: dict, params: dict, alone: set):
        """A data-parallel store over `group` (dp_cp, or edp for experts) of the parameters in `units`."""
        cfg, g = self.cfg, self.groups
        units = {u: names for u, names in units.items() if names}
        return make_store(cfg.stage, self.comm, g.groups.get(group), g.size(group), g.index(group, self.comm.rank),
                          units, {n: params[n] for names in units.values() for n in names}, self.specs,
                          cfg.make_optimizer(), self.layout.bucket_size, cfg.overlap_grad_reduce, alone=alone,
                          size_only=cfg.size_only)

    def _parts(self) -> list:
        """Every data-parallel store of every chunk (the dense ones first)."""
        return [p for s in self.stores for p in getattr(s, "parts", (s,))]

    def _tied_across_stages(self) -> bool:
        """The word embedding is tied and its two ends are different model stages (their gradients summed)."""
        return self.layout.virtual_stages > 1 and not self.layout.model.untie_embeddings_and_output_weights

    # ---- one step ----------------------------------------------------------------------------------------
    def _microbatches(self, step: int):
        cfg, m = self.cfg, self.layout.model
        scale = 1.0 / (cfg.global_batch_size * m.seq_length)
        if cfg.size_only:
            ids = Meta((len(self.positions), self.micro), np.int64)
            return lambda _mb: (ids, ids, scale)
        ids, targets = data.batch(m, cfg.global_batch_size, step, cfg.data_seed)
        first = self.coords["dp"] * (cfg.global_batch_size // self.layout.dims.dp)

        def microbatch(mb):
            rows = slice(first + mb * self.micro, first + (mb + 1) * self.micro)
            return ids[self.positions, rows], targets[self.positions, rows], scale
        return microbatch

    def step(self, step: int) -> float | None:
        """One optimizer step; returns this rank's share of the global loss (None off the last stage)."""
        losses = self.runner.run(self.actions, self._microbatches(step))
        comm, cfg = self.comm, self.cfg
        dense = [getattr(s, "dense", s) for s in self.stores]
        with comm.tagged(phase="grad_sync"):
            for store in self._parts():
                store.finish()
            if "mirror" in self.groups.ranks:  # DualPipe's two copies of each stage: one gradient
                order = sorted(range(len(self.stores)), key=lambda c: self.layout.placement.stage(self.coords["pp"], c))
                for c in order:
                    store = self.stores[c]
                    all_reduce_held(comm, store, [n for ns in store.units.values() for n in ns],
                                    self.groups.groups["mirror"], "pp")
            if cfg.sequence_parallel and self.tp.size > 1:
                names = [n for n, s in self.specs.items() if s.sequence_parallel]
                for store in dense:
                    all_reduce_held(comm, store, names, self.tp.group, "tp")
            ends = [store for chunk, store in zip(self.chunks, dense) if chunk.pre or chunk.post]
            if "embedding" in self.groups.ranks:
                for store in ends:
                    all_reduce_held(comm, store, [WORD], self.groups.groups["embedding"], "embedding")
            elif len(ends) == 2 and self._tied_across_stages():  # V, DualPipe: one rank holds both ends
                add_held(ends, [WORD])
        with comm.tagged(phase="optimizer"):
            for store in self._parts():
                store.step()
        self._update_expert_bias()
        if not losses:
            return None
        return None if is_meta(losses[0]) else float(sum(value(x) for x in losses))

    def _update_expert_bias(self) -> None:
        """Aux-loss-free balancing: each MoE layer's bias moves by the step's tokens per expert, summed over the
        stage's ranks (TP x CP x DP: every token of the step routed once), as Megatron does after the step."""
        layers = [i for i in self.expert_bias if i in self._held_layers()]
        if not layers:
            return
        counts = np.stack([self.routed[i] for i in layers])
        if self.groups.size("stage") > 1:
            with self.comm.tagged(axis="dp", phase="optimizer"):
                counts = self.comm.all_reduce(counts, self.groups.groups["stage"])
        rate = self.layout.model.moe_router_bias_update_rate
        for i, c in zip(layers, counts):
            self.expert_bias[i] = updated_expert_bias(self.expert_bias[i], c, rate)
            self.routed[i] = np.zeros_like(self.routed[i])

    def _held_layers(self) -> set:
        return {i for chunk in self.chunks for i in chunk.layers}

    def result(self, loss_shares: list) -> dict:
        params, shards = {}, []
        for store in self._parts():
            local = store.local_params()
            if local is not None:
                params.update(local)
            shards.extend(store.shards())
        c = self.cfg
        tokens = c.global_batch_size // self.layout.dims.dp * len(self.positions)
        full_share = c.global_batch_size * self.layout.model.seq_length
        return {"rank": self.comm.rank, "coords": self.coords, "expert_coords": self.expert_coords,
                "loss": [None if s is None else s * full_share / tokens for s in loss_shares],
                "loss_share": loss_shares, "params": None if c.size_only else params,
                "shards": None if c.size_only else shards, "flops": self.comm.fl.total,
                "state_bytes": {k: sum(s.state_bytes()[k] for s in self._parts()) for k in ("params", "grads",
                                                                                              "optimizer")}}


def train_with(rank: int, dist, layout: Layout) -> dict:
    """Train layout.config.train_iters steps on this rank with `dist` (simcomm.distributed or torch.distributed);
    returns the rank's losses, parameters (or ZeRO-3 shards) and the bytes of state it keeps."""
    comm = RankComm(dist)
    trainer = RankTrainer(comm, layout)
    shares = [trainer.step(s) for s in range(layout.config.train_iters)]
    comm.synchronize()
    return trainer.result(shares)


def train(rank: int, layout: Layout) -> dict:
    """The rank program for simcomm.spawn(train, args=(layout,), nprocs=layout.world_size)."""
    return train_with(rank, None, layout)


def gpt_training(rank: int, settings: dict | None = None) -> dict:
    """Train the numeric GPT from a scenario's `args`: TrainingConfig fields (Megatron names), `model` (a preset
    name or a dict of TransformerConfig fields) and `world_size` (default: every rank of the job). Returns the
    rank's losses, coordinates and state bytes."""
    from .. import distributed as dist
    from .model.config import ModelConfigError, TransformerConfig, model_preset
    settings = dict(_fields(TrainingConfig, settings or {}, "gpt_training's settings", ConfigError, extra=("model",)))
    model = settings.pop("model", {"num_layers": 4, "hidden_size": 32, "num_attention_heads": 4,
                                   "seq_length": 16, "padded_vocab_size": 64})
    model = model_preset(model) if isinstance(model, str) else \
        TransformerConfig(**_fields(TransformerConfig, model, "model", ModelConfigError))
    layout = build_layout(model, TrainingConfig(**settings), dist.get_world_size())
    out = train(rank, layout)
    return {"loss": out["loss"], "coords": out["coords"], "state_bytes": out["state_bytes"]}


def _fields(cls, values, what: str, error, extra: tuple[str, ...] = ()) -> dict:
    """`values` as keyword arguments of the dataclass `cls`: a mapping of its field names (and `extra`) that gives
    every required one; else `error` naming the field."""
    import dataclasses

    from ..vocab import did_you_mean
    if not isinstance(values, dict):
        raise error(f"{what} must be a mapping of {cls.__name__} fields" + (" or a preset name" if what == "model"
                                                                          else "") + f", got {values!r}",
                    "model" if what == "model" else None)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in values:
        if key not in fields and key not in extra:
            raise error(f"{what}: unknown setting {key!r}{did_you_mean(key, [*fields, *extra])}", str(key))
    missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in values]
    if missing:
        raise error(f"{what}: give {', '.join(missing)}", missing[0])
    return values
