"""tp x cp x dp x pp on one rank grid (ParallelDims, Megatron's order): the rank program that trains the numeric
GPT with every parallelism composed.

Each rank builds its share of the model: the virtual pipeline stages it holds (GPTChunks), each with tensor-
parallel mappings over its TP group, ring attention over its CP group, and a data-parallel store (DDP or ZeRO-1/2/3)
over its data-parallel group, which Megatron widens to dp x cp (context-parallel ranks hold the same weights and
see different tokens). A step runs the pipeline schedule, then finishes the gradient reductions, all-reduces
the sequence-parallel gradients over TP and the tied embedding over the first and last stage, and steps the
optimizer.

    result = simcomm.spawn(train, args=(cfg,), nprocs=cfg.world_size)      # on the simulator
    compare(train_with, (cfg,), nprocs=cfg.world_size)                     # and against real gloo
"""
from __future__ import annotations

import numpy as np

from . import data
from .comm import Comm
from .context_parallel import RingAttention, load_balanced_positions
from .data_parallel import make_store
from .data_parallel.reduce import all_reduce_held
from .dims import Axis, LayoutError
from .model.gpt import WORD, ChunkContext, GPTChunk, NoTensorParallel, init_params, local_shape, param_specs, shard
from .model.tensor import Meta, is_meta, value
from .pipeline_parallel.p2p import StageLinks
from .pipeline_parallel.runner import PipelineRunner
from .pipeline_parallel.schedules import schedule
from .tensor_parallel import TensorParallel
from .train_config import TrainConfig


class RankGroups:
    """Every process group of the layout, created on every rank in the same order; this rank's ones kept."""

    def __init__(self, comm: Comm, cfg: TrainConfig, rank: int):
        dims = cfg.dims
        grid = dims.grid
        self.ranks: dict[str, list[int]] = {}
        self.groups: dict[str, object] = {}
        layouts = {a.value: dims.groups(a) for a in (Axis.TP, Axis.CP, Axis.DP, Axis.PP)}
        # the gradient-reduction group: dp x cp ranks with the same (pp, tp)
        layouts["dp_cp"] = np.moveaxis(grid, 3, 1).reshape(dims.pp * dims.tp, dims.dp * dims.cp)
        if dims.pp > 1 and not cfg.model.untie_embeddings_and_output_weights:
            layouts["embedding"] = np.stack([grid[0].reshape(-1), grid[-1].reshape(-1)], axis=1)
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

    def __init__(self, comm: Comm, cfg: TrainConfig):
        if comm.world_size != cfg.world_size:
            raise LayoutError(f"the layout {cfg.dims.describe()} needs {cfg.world_size} ranks; the job has "
                              f"{comm.world_size}")
        self.comm, self.cfg = comm, cfg
        rank, dims, m = comm.rank, cfg.dims, cfg.model
        self.coords = {a.value: i for a, i in dims.coords(rank).items()}
        self.groups = g = RankGroups(comm, cfg, rank)
        t, c, p, v = dims.tp, dims.cp, dims.pp, cfg.virtual_pipeline_model_parallel_size
        self.tp = TensorParallel(comm, g.groups.get("tp"), t, self.coords["tp"], cfg.sequence_parallel) if t > 1 \
            else NoTensorParallel()
        self.positions = load_balanced_positions(m.seq_length, c, self.coords["cp"])
        attention = RingAttention(comm, g.ranks["cp"], self.coords["cp"], m.seq_length, comm.fl) if c > 1 else None
        self.specs = param_specs(m)
        self.dtype = dtype = cfg.numpy_dtype  # bfloat16 (size-only runs only) is held as float16: same bytes
        full = None if cfg.size_only else init_params(m, cfg.seed, dtype)
        optimizer = cfg.make_optimizer()
        tied_across_stages = "embedding" in g.ranks
        per_stage = m.num_layers // (p * v)
        self.chunks, self.stores = [], []
        for chunk in range(v):
            stage = chunk * p + self.coords["pp"]
            ctx = ChunkContext(m, None, self.positions, self.tp, attention, comm.fl,
                               not m.untie_embeddings_and_output_weights)
            model = GPTChunk(range(stage * per_stage, (stage + 1) * per_stage), stage == 0, stage == p * v - 1, ctx)
            units = model.param_names()
            params = {n: Meta(local_shape(self.specs[n], t), dtype) if full is None else
                      shard(full[n], self.specs[n], t, self.coords["tp"]) for names in units.values() for n in names}
            ctx.store = make_store(cfg.data_parallel, comm, g.groups.get("dp_cp"), g.size("dp_cp"),
                                   g.index("dp_cp", rank), units, params, self.specs, optimizer,
                                   cfg.effective_bucket_size, cfg.overlap_grad_reduce,
                                   alone={WORD} if tied_across_stages else set(), size_only=cfg.size_only)
            self.chunks.append(model)
            self.stores.append(ctx.store)
        self.links = StageLinks(comm, g.ranks["pp"], self.coords["pp"])
        self.micro = cfg.micro_batch_size_or_default
        seq = m.seq_length // c // (t if cfg.sequence_parallel else 1)
        like = Meta((1,), dtype) if cfg.size_only else np.zeros(1, dtype)
        self.runner = PipelineRunner(comm, self.links, self.chunks, self.stores, (seq, self.micro, m.hidden_size),
                                     like)
        self.actions = schedule(cfg.pipeline_schedule, p, cfg.num_microbatches, v)[self.coords["pp"]]

    # ---- one step ----------------------------------------------------------------------------------------
    def _microbatches(self, step: int):
        cfg, m = self.cfg, self.cfg.model
        scale = 1.0 / (cfg.global_batch_size * m.seq_length)
        if cfg.size_only:
            ids = Meta((len(self.positions), self.micro), np.int64)
            return lambda _mb: (ids, ids, scale)
        ids, targets = data.batch(m, cfg.global_batch_size, step, cfg.data_seed)
        first = self.coords["dp"] * (cfg.global_batch_size // cfg.dims.dp)

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
            if cfg.sequence_parallel and self.tp.size > 1:
                names = [n for n, s in self.specs.items() if s.sequence_parallel]
                for store in self.stores:
                    all_reduce_held(comm, store, names, self.tp.group, "tp")
            if "embedding" in self.groups.ranks:
                for chunk, store in zip(self.chunks, self.stores):
                    if chunk.pre or chunk.post:
                        all_reduce_held(comm, store, [WORD], self.groups.groups["embedding"], "embedding")
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
        tokens = c.global_batch_size // c.dims.dp * len(self.positions)
        full_share = c.global_batch_size * c.model.seq_length
        return {"rank": self.comm.rank, "coords": self.coords,
                "loss": [None if s is None else s * full_share / tokens for s in loss_shares],
                "loss_share": loss_shares, "params": None if c.size_only else params,
                "shards": None if c.size_only else shards,
                "state_bytes": {k: sum(s.state_bytes()[k] for s in self.stores) for k in ("params", "grads",
                                                                                            "optimizer")}}


def train_with(rank: int, dist, cfg: TrainConfig) -> dict:
    """Train cfg.train_iters steps on this rank with `dist` (simcomm.distributed or torch.distributed); returns
    the rank's losses, parameters (or ZeRO-3 shards) and the bytes of state it keeps."""
    comm = Comm(dist)
    trainer = RankTrainer(comm, cfg)
    shares = [trainer.step(s) for s in range(cfg.train_iters)]
    comm.synchronize()
    return trainer.result(shares)


def train(rank: int, cfg: TrainConfig) -> dict:
    """The rank program for simcomm.spawn(train, args=(cfg,), nprocs=cfg.world_size)."""
    return train_with(rank, None, cfg)
