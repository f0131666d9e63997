"""launch(): install the patches, run the script's ranks as a simulated world, restore everything."""
from __future__ import annotations

import os
import sys
import time as _time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as tdist
import torch.multiprocessing as tmp

from ...distributed.spawn import MAX_RANKS, resolve_cluster
from ...errors import SimcommError
from ...units import parse_positive, parse_whole
from ...vocab import MAX_NODES, MAX_RANKS_PER_NODE
from ..placement import torchrun_cluster
from . import clock as launch_clock
from .c10d import RankWorlds
from . import multiprocessing as launch_mp
from .cuda import LaunchDevice, cuda_functions
from .ddp import patches as ddp_patches
from .dist import replacements
from .locks import patches as lock_patches
from .mesh import patches as mesh_patches
from .environ import RankEnviron
from .patching import Patcher
from .script import MainProxy, Script
from .world import Options, World, intra_op_threads


@dataclass
class WorldRecord:
    """What one world of the launch did, in simulated time."""

    kind: str  # "torchrun", "python" (the script as one process), "spawn" or "process"
    nprocs: int
    cluster: str
    elapsed: float | None  # simulated seconds; None if it failed
    finish_times: list = field(default_factory=list)
    error: str | None = None


@dataclass
class LaunchResult:
    worlds: list[WorldRecord]  # the script's own world first, then those it started, in order

    @property
    def ok(self) -> bool:
        """Whether the script ended normally (a world it started may have failed and the script handled it, as a
        parent process may handle its children's failure)."""
        return not self.worlds or self.worlds[0].error is None


class _Launch:
    """The patches of one launch, and the worlds it runs."""

    def __init__(self, options: Options, script: Script | None, argv: list[str]):
        self.options, self.script, self.argv = options, script, argv
        self.worlds: list[World] = []
        self.patcher = Patcher()

    def new_world(self, kind: str, nprocs: int, environs: list, main_module, cluster=None,
                  local_ranks=None) -> World:
        c = cluster or resolve_cluster(self.options.cluster, nprocs)
        world = World(kind, nprocs, c, self.options, main_module, environs,
                      local_ranks or [r % c.ranks_per_node for r in range(nprocs)])
        self.worlds.append(world)
        return world

    def __enter__(self):
        p = self.patcher
        for name, fn in replacements().items():
            p.set(tdist, name, fn)
        for owner, name, fn in mesh_patches():
            p.set(owner, name, fn)
        p.set(tdist.distributed_c10d, "_world", RankWorlds(tdist.distributed_c10d._world))
        for owner, name, fn in ddp_patches():
            p.set(owner, name, fn)
        originals = {name: getattr(torch.cuda, name) for name in dir(torch.cuda)}
        for name, fn in cuda_functions(originals).items():
            p.set(torch.cuda, name, fn)
        p.set(torch, "device", LaunchDevice)
        for name, fn in launch_clock.REPLACEMENTS.items():
            p.set(_time, name, fn)
        for owner, name, fn in lock_patches():
            p.set(owner, name, fn)
        import multiprocessing as std_mp
        launch_mp._STATE.update(new_world=self.new_world, start_method=None,
                                originals={name: getattr(std_mp, name) for name in launch_mp.REPLACEMENTS
                                           if hasattr(std_mp, name)} | {"spawn": tmp.spawn})
        for name, fn in launch_mp.REPLACEMENTS.items():
            p.set(tmp, name, fn)
            if name in ("Process", "get_context", "set_start_method", "get_start_method"):
                p.set(std_mp, name, fn)
        self.environ = RankEnviron(os.environ)
        p.set(os, "environ", self.environ)
        if self.script is not None:
            p.set(sys, "argv", [str(self.script.path), *self.argv])
            p.set(sys, "path", [str(self.script.path.parent), *sys.path])
        self.real_main = sys.modules["__main__"]
        sys.modules["__main__"] = MainProxy(self.real_main)
        return self

    def __exit__(self, *exc):
        sys.modules["__main__"] = self.real_main
        self.patcher.restore()
        self.environ.restore()
        launch_mp._STATE.clear()
        return False


def _torchrun_environ(base: dict, rank: int, nproc_per_node: int, nnodes: int, port: int) -> dict:
    """What torchrun puts in each rank's environment."""
    world = nproc_per_node * nnodes
    env = dict(base)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank % nproc_per_node), GROUP_RANK=str(rank // nproc_per_node),
               ROLE_RANK=str(rank), NODE_RANK=str(rank // nproc_per_node), WORLD_SIZE=str(world),
               LOCAL_WORLD_SIZE=str(nproc_per_node), ROLE_WORLD_SIZE=str(world), GROUP_WORLD_SIZE=str(nnodes),
               ROLE_NAME="default", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               TORCHELASTIC_RUN_ID="simcomm", TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0")
    if nproc_per_node > 1:  # torchrun's default, so that the ranks of a node do not oversubscribe its cores
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


@contextmanager
def _intra_op_threads(environ: dict):
    """This (the scheduler's) thread's torch intra-op threads as the ranks' OMP_NUM_THREADS asks, for the run (then
    as before): DDP's callbacks run here, and a reduction split over other thread counts sums in another order. Each
    rank thread sets its own (World.run)."""
    threads = intra_op_threads(environ)
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def launch(script, script_args=(), nproc_per_node: int | None = None, nnodes: int | None = None,
           cluster="hgx-h100", *, cuda_as: str = "cpu", count_flops: bool = False, flop_rate: float | None = None,
           numerics: str | None = None) -> LaunchResult:
    """Run `script` as torchrun would (nnodes x nproc_per_node ranks, each running the file as __main__, with
    torchrun's RANK, WORLD_SIZE, LOCAL_RANK, ... in its environment), on the simulated `cluster`; with neither
    nproc_per_node nor nnodes given, as `python script` would: one process whose environment is the launching
    one's, with no torchrun variables. Scripts that start their own ranks with torch.multiprocessing run those as
    worlds too; each such rank's environment is a copy of its parent's, as torch.multiprocessing gives a child
    process (torch sets no RANK there either).

    Raises what a rank raised (SimcommError subclasses: RankFailed, DeadlockError, MismatchError, ...).
    """
    python_mode = nproc_per_node is None and nnodes is None
    nproc_per_node = 1 if nproc_per_node is None else parse_whole(nproc_per_node, "nproc_per_node", 1,
                                                                  MAX_RANKS_PER_NODE)
    nnodes = 1 if nnodes is None else parse_whole(nnodes, "nnodes", 1, MAX_NODES)
    if nproc_per_node * nnodes > MAX_RANKS:
        raise SimcommError(f"{nnodes} nodes x {nproc_per_node} ranks: a launch runs at most {MAX_RANKS} ranks (a "
                           f"thread each)")
    if cuda_as not in ("cpu", "meta"):
        raise SimcommError(f"cuda_as must be 'cpu' or 'meta', got {cuda_as!r}")
    if flop_rate is not None:
        flop_rate = parse_positive(flop_rate, "flop_rate")
    options = Options(cluster, cuda_as, count_flops, flop_rate, numerics, torch.get_num_threads())
    s = Script(script)
    n = nproc_per_node * nnodes
    c = torchrun_cluster(cluster, nproc_per_node, nnodes)
    with _Launch(options, s, list(script_args)) as active:
        base = active.environ.snapshot()
        envs = [base] if python_mode else [_torchrun_environ(base, r, nproc_per_node, nnodes, 29500)
                                           for r in range(n)]
        modules = [s.new_module() for _ in range(n)]
        world = active.new_world("python" if python_mode else "torchrun", n, envs, None, cluster=c,
                                 local_ranks=[r % nproc_per_node for r in range(n)])

        def rank_main(rank):
            from .context import current_context
            current_context().main_module = modules[rank]
            s.run(modules[rank], rank)

        try:
            with _intra_op_threads(envs[0]):
                world.run(rank_main)
        finally:
            records = [_record(w) for w in active.worlds]
    return LaunchResult(records)


def _record(w: World) -> WorldRecord:
    r = w.result
    return WorldRecord(w.kind, w.nprocs, w.cluster.name, None if r is None else r.elapsed,
                       [] if r is None else list(r.finish_times), None if w.error is None else str(w.error))


def run_launched(fn, args=(), nprocs: int = 2, cluster="cpu-host", backend: str = "gloo", **options) -> list:
    """fn(rank, torch.distributed, *args) on the simulator through the launcher's torch interception (the path an
    unmodified script takes), after init_process_group(backend); returns each rank's return value.

    The library form of `simcomm launch`, and the simulated half of the conformance suite (the real half is
    backends.run_real, which calls the same fn with real torch.distributed)."""
    opts = Options(cluster, options.pop("cuda_as", "cpu"), options.pop("count_flops", False),
                   options.pop("flop_rate", None), options.pop("numerics", None), torch.get_num_threads())
    if options:
        raise SimcommError(f"unknown option(s) {sorted(options)}")
    c = resolve_cluster(cluster, nprocs)
    with _Launch(opts, None, []) as active:
        base = active.environ.snapshot()
        envs = [_torchrun_environ(base, r, nprocs, 1, 29500) for r in range(nprocs)]
        world = active.new_world("torchrun", nprocs, envs, None, cluster=c)

        def body(rank):
            tdist.init_process_group(backend, rank=rank, world_size=nprocs)
            value = fn(rank, tdist, *args)
            tdist.destroy_process_group()
            return value
        with _intra_op_threads(envs[0]):
            return world.run(body).results
