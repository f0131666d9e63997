"""Per-rank state of a launched script: what would be per-process state on a real cluster.

Ranks are threads of one process, so everything a real rank keeps in its own process (its environment, its
current CUDA device, whether it has joined the process group, its random generators, the compute it has queued)
lives here, in a thread-local RankContext.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

import numpy as np

_local = threading.local()


@dataclass
class RankContext:
    """One rank's process-level state."""

    rank: int
    world_size: int
    local_rank: int
    environ: dict  # this rank's os.environ
    world: object  # the World this rank belongs to (runner.World)
    cuda_device: int = 0
    initialized: bool = False  # init_process_group called (and not destroyed)
    pending_flops: float = 0.0  # torch compute counted since the last synchronising call
    rng: tuple | None = field(default=None, repr=False)  # saved (torch, random, numpy) generator states
    main_module: object = field(default=None, repr=False)  # the script's __main__ as this rank sees it
    c10d: object = field(default=None, repr=False)  # torch's process-group bookkeeping for this rank (c10d.py)

    # ---- random generators: one stream per rank, as each process has its own -------------------------------
    def save_rng(self) -> None:
        import torch
        self.rng = (torch.get_rng_state(), random.getstate(), np.random.get_state())

    def restore_rng(self) -> None:
        if self.rng is None:
            return
        import torch
        torch_state, py_state, np_state = self.rng
        torch.set_rng_state(torch_state)
        random.setstate(py_state)
        np.random.set_state(np_state)


def current_context() -> RankContext | None:
    """The calling thread's rank context, or None outside a launched rank."""
    return getattr(_local, "ctx", None)


def set_context(ctx: RankContext | None) -> None:
    _local.ctx = ctx
