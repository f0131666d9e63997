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
from .config import TrainingConfig
from .context_parallel import RingAttention, load_balanced_positions
from .data_parallel import make_store
from .data_parallel.reduce import add_held, all_reduce_held
from .dims import Axis, LayoutError
from .layout import Layout, build_layout
from .model.gpt import WORD, ChunkContext, GPTChunk, NoTensorParallel, init_params, local_shape, param_specs, shard
from .model.tensor import Meta, is_meta, value
from .numeric_compute import KernelCharges
from .pipeline_parallel.p2p import StageLinks
from .pipeline_parallel.runner import PipelineRunner
from .rank_comm import RankComm
from .tensor_parallel import TensorParallel


class RankGroups:
    """Every process group of the layout, created on every rank in the same order; this rank's ones kept."""

    def __init__(self, comm: RankComm, layout: Layout, rank: int):
        dims = layout.dims
        self.ranks: dict[str, list[int]] = {}
        self.groups: dict[str, object] = {}
        layouts = {a.value: dims.groups(a) for a in (Axis.TP, Axis.CP, Axis.DP, Axis.PP)}
        # the gradient-reduction group: dp x cp ranks with the same (pp, tp)
        layouts["dp_cp"] = dims.groups(Axis.DP, Axis.CP)
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
        cfg, dims, m = layout.config, layout.dims, layout.model
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

    def _chunk(self, chunk: int, full: dict | None):
        """Model chunk `chunk` of this pipeline rank (the layers the layout gives it) and its parameter store."""
        layout, cfg, m, g = self.layout, self.cfg, self.layout.model, self.groups
        r, t = self.coords["pp"], layout.dims.tp
        ctx = ChunkContext(m, None, self.positions, self.tp, self.attention, self.comm.fl,
                           not m.untie_embeddings_and_output_weights, self.comm.kernels)
        layers = layout.layers_of(r, chunk)
        model = GPTChunk(range(layers[0], layers[-1] + 1), layout.has_embedding(r, chunk),
                         layout.has_output(r, chunk), ctx)
        units = model.param_names()
        params = {n: Meta(local_shape(self.specs[n], t), self.dtype) if full is None else
                  shard(full[n], self.specs[n], t, self.coords["tp"]) for names in units.values() for n in names}
        ctx.store = make_store(cfg.stage, self.comm, g.groups.get("dp_cp"), g.size("dp_cp"),
                               g.index("dp_cp", self.comm.rank), units, params, self.specs, cfg.make_optimizer(),
                               layout.bucket_size, cfg.overlap_grad_reduce,
                               alone={WORD} if self._tied_across_stages() else set(), size_only=cfg.size_only)
        return model, ctx.store

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
        with comm.tagged(phase="grad_sync"):
            for store in self.stores:
                store.finish()
            if "mirror" in self.groups.ranks:  # DualPipe's two copies of each stage: one gradient
                order = sorted(range(len(self.stores)), key=lambda c: self.layout.placement.stage(self.coords["pp"], c))
                for c in order:
                    store = self.stores[c]
                    all_reduce_held(comm, store, [n for ns in store.units.values() for n in ns],
                                    self.groups.groups["mirror"], "pp")
            if cfg.sequence_parallel and self.tp.size > 1:
                names = [n for n, s in self.specs.items() if s.sequence_parallel]
                for store in self.stores:
                    all_reduce_held(comm, store, names, self.tp.group, "tp")
            ends = [store for chunk, store in zip(self.chunks, self.stores) if chunk.pre or chunk.post]
            if "embedding" in self.groups.ranks:
                for store in ends:
                    all_reduce_held(comm, store, [WORD], self.groups.groups["embedding"], "embedding")
            elif len(ends) == 2 and self._tied_across_stages():  # V, DualPipe: one rank holds both ends
                add_held(ends, [WORD])
        with comm.tagged(phase="optimizer"):
            for store in self.stores:
                store.step()
        if not losses:
            return None
        return None if is_meta(losses[0]) else float(sum(value(x) for x in losses))

    def result(self, loss_shares: list) -> dict:
        params, shards = {}, []
        for store in self.stores:
            local = store.local_params()
            if local is not None:
                params.update(local)
            shards.extend(store.shards())
        c = self.cfg
        tokens = c.global_batch_size // self.layout.dims.dp * len(self.positions)
        full_share = c.global_batch_size * self.layout.model.seq_length
        return {"rank": self.comm.rank, "coords": self.coords,
                "loss": [None if s is None else s * full_share / tokens for s in loss_shares],
                "loss_share": loss_shares, "params": None if c.size_only else params,
                "shards": None if c.size_only else shards, "flops": self.comm.fl.total,
                "state_bytes": {k: sum(s.state_bytes()[k] for s in self.stores) for k in ("params", "grads",
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
    from .model.config import TransformerConfig, model_preset
    settings = dict(settings or {})
    model = settings.pop("model", {"num_layers": 4, "hidden_size": 32, "num_attention_heads": 4,
                                   "seq_length": 16, "padded_vocab_size": 64})
    model = model_preset(model) if isinstance(model, str) else TransformerConfig(**model)
    layout = build_layout(model, TrainingConfig(**settings), dist.get_world_size())
    out = train(rank, layout)
    return {"loss": out["loss"], "coords": out["coords"], "state_bytes": out["state_bytes"]}
