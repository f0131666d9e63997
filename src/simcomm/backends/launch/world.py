"""A World: one group of ranks started together (the torchrun ranks, or one torch.multiprocessing.spawn), run as
threads on one simulation of the cluster."""
from __future__ import annotations

import copy
import time as _time
from dataclasses import dataclass, field

from ...distributed.spawn import SpawnResult, spawn
from ...errors import SimcommError
from .c10d import forget
from .compute import FlopCounter
from .context import RankContext, current_context, set_context
from .cuda import DeviceMode


@dataclass
class Options:
    """How a launch maps the script onto the simulator."""

    cluster: object  # preset name, profile path, or Cluster
    cuda_as: str = "cpu"  # "cpu" (real data) or "meta" (size-only)
    count_flops: bool = False
    flop_rate: float | None = None  # FLOP/s; default: the cluster device's compute rate
    numerics: str | None = None
    intra_op_threads: int | None = None  # a process's torch threads when OMP_NUM_THREADS does not say (None: as now)


@dataclass
class World:
    """One started group of ranks and, once run, what happened."""

    kind: str  # "torchrun", "python" (the script run as one process), "spawn" or "process"
    nprocs: int
    cluster: object  # a Cluster
    options: Options
    main_module: object = None  # the script's __main__ module the ranks run in
    environs: list = field(default_factory=list)  # each rank's initial os.environ
    local_ranks: list = field(default_factory=list)
    result: SpawnResult | None = None
    error: BaseException | None = None
    epoch: float = 0.0  # wall-clock time.time() at simulated t = 0
    perf_epoch: float = 0.0

    @property
    def gpu(self) -> bool:
        return self.cluster.device.kind == "gpu"

    @property
    def torchrun(self) -> bool:
        return self.kind == "torchrun"

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.ranks_per_node

    @property
    def device_name(self) -> str:
        return self.cluster.device.name

    @property
    def flop_rate(self) -> float:
        return self.options.flop_rate or self.cluster.device.compute_rate

    @property
    def elapsed(self) -> float | None:
        return None if self.result is None else self.result.elapsed

    def run(self, target) -> SpawnResult:
        """Run target(rank) in every rank thread; returns simcomm's SpawnResult (raises what a rank raised)."""
        import torch
        rng = (torch.get_rng_state(), *_py_np_rng())
        self.epoch, self.perf_epoch = _time.time(), _time.perf_counter()

        def body(rank):
            ctx = RankContext(rank, self.nprocs, self.local_ranks[rank], dict(self.environs[rank]), self,
                              rng=copy.deepcopy(rng) if rank else rng)
            ctx.main_module = self.main_module
            set_context(ctx)
            torch.set_num_threads(intra_op_threads(ctx.environ) or self.options.intra_op_threads
                                  or torch.get_num_threads())
            ctx.restore_rng()
            modes = [DeviceMode(self.options.cuda_as)] + ([FlopCounter()] if self.options.count_flops else [])
            for m in modes:
                m.__enter__()
            try:
                value = target(rank)
                from .dist import blocking
                with blocking(ctx):  # charge compute still queued when the rank ends
                    pass
                return value
            finally:
                for m in reversed(modes):
                    m.__exit__(None, None, None)
                forget(ctx)  # the rank's torch groups, as its process's end would
                set_context(None)

        try:
            # A thread per rank: torch keeps grad mode, autocast and dispatch modes per thread.
            self.result = spawn(body, nprocs=self.nprocs, cluster=self.cluster, numerics=self.options.numerics,
                                execution="thread")
        except BaseException as exc:
            self.error = exc
            raise
        return self.result


def intra_op_threads(environ: dict) -> int | None:
    """torch's intra-op threads for a process with this environment: OMP_NUM_THREADS when it is a whole number >= 1
    (torch reads it at start, and torchrun sets 1 for more than one rank per node), else None.

    Each rank thread sets its own: OpenMP keeps the thread count per thread, and a new thread starts with the
    process's default until torch first asks, so a rank whose first kernel is a GEMM would run it on every core
    (and sum in another order) while reporting the one thread it was given."""
    value = environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) >= 1 else None


def _py_np_rng():
    import random

    import numpy as np
    return random.getstate(), np.random.get_state()


def parent_context() -> RankContext:
    ctx = current_context()
    if ctx is None:
        raise SimcommError("internal: a launched world was started outside a launched rank")
    return ctx
