"""simcomm.spawn: run a rank program on a simulated cluster, the way torch.multiprocessing.spawn runs it."""
from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

from .groups import GroupRegistry
from .p2p import P2PMatcher, UnmatchedP2PWarning
from .rendezvous import CollectiveRendezvous
from .runtime import RankRuntime
from ..engine import Activity, Simulation, resolve_detail
from ..session import Session
from ..errors import SimcommError
from ..hardware import Cluster, build_cluster
from ..vocab import MAX_RANKS_PER_NODE


MAX_RANKS = 16384  # a greenlet (or a thread) per rank


@dataclass
class SpawnResult:
    """What a simulated run returns: each rank's return value, the simulated time, and the timeline."""

    results: list
    elapsed: float  # simulated seconds from start to the last activity
    finish_times: list[float]  # when each rank's function returned
    simulation: Simulation

    @property
    def timeline(self) -> list[Activity]:
        return self.simulation.recorder.activities()

    @property
    def cluster(self) -> Cluster:
        return self.simulation.cluster

    def stats(self) -> dict:
        return self.simulation.stats()


def resolve_cluster(cluster, nprocs: int | None) -> Cluster:
    """A Cluster from a Cluster or a preset name, with enough ranks for nprocs."""
    if isinstance(cluster, Cluster):
        return cluster
    if not isinstance(cluster, str):
        raise SimcommError(f"cluster must be a preset name or a simcomm Cluster, got {cluster!r}")
    if cluster == "cpu-host":  # one host with a process per rank
        if nprocs is not None and nprocs > MAX_RANKS_PER_NODE:
            raise SimcommError(f"nprocs={nprocs}: cpu-host is one host, which holds at most {MAX_RANKS_PER_NODE} "
                               f"ranks (as in a scenario: more threads than a user would wait for on one machine); "
                               f"pass a Cluster of several hosts, e.g. build_cluster('cpu-host', nodes=N, "
                               f"ranks_per_node=K)")
        return build_cluster("cpu-host", ranks_per_node=nprocs or 4)
    probe = build_cluster(cluster)
    nodes = max(1, math.ceil((nprocs or probe.num_ranks) / probe.ranks_per_node))
    return probe if nodes == 1 else build_cluster(cluster, nodes=nodes)


START_METHODS = ("spawn", "fork", "forkserver")


def spawn(fn, args=(), nprocs: int | None = None, cluster="hgx-h100", *, algorithm=None, protocol=None,
          numerics: str | None = None, detail: str | None = None, join: bool = True, daemon: bool = False,
          start_method: str = "spawn", execution: str | None = None) -> SpawnResult:
    """Run fn(rank, *args) for every rank on a simulated cluster and return a SpawnResult.

    fn, args, nprocs, join, daemon and start_method are torch.multiprocessing.spawn's; ranks are no processes
    here, so daemon and start_method change nothing (start_method must still be one of torch's).
    cluster: a preset name ("hgx-h100", "cpu-host", ...) or a Cluster; nprocs defaults to all its ranks.
    algorithm / protocol force NCCL_ALGO / NCCL_PROTO (algorithm may be a dict per collective kind).
    numerics: "gloo" (bitwise gloo ring order) or "nccl"; the default follows the cluster (CPU -> gloo).
    detail: what the timeline keeps, "flows" (every flow, and each link's load) or "steps"; by default every flow
    up to 64 ranks and steps beyond (engine.resolve_detail), so a large run costs no more than "steps" unless
    its flows are asked for.
    execution: how ranks keep their call stacks, "greenlet" (fast) or "thread" (for libraries with per-thread
    state, such as torch's grad mode); by default greenlets unless torch is loaded (see distributed/execution.py).

    A failed run raises its SimcommError (RankFailed, DeadlockError, ...) with two more attributes: simulated_time
    (when it stopped) and finished (the ranks whose function had returned).
    """
    if start_method not in START_METHODS:
        raise SimcommError(f"start_method={start_method!r}: expected one of {', '.join(START_METHODS)}, as "
                           "torch.multiprocessing.spawn takes")
    if nprocs is not None and (isinstance(nprocs, bool) or not isinstance(nprocs, numbers.Integral)):
        raise SimcommError(f"nprocs must be a whole number of ranks, got {nprocs!r}")
    if nprocs is not None and not 1 <= nprocs <= MAX_RANKS:
        raise SimcommError(f"nprocs={nprocs}: simcomm.spawn takes 1 to "
                           f"{MAX_RANKS} ranks (simulate more with group-level workloads)")
    c = resolve_cluster(cluster, nprocs)
    n = int(nprocs) if nprocs is not None else c.num_ranks
    if not 1 <= n <= c.num_ranks:
        raise SimcommError(f"nprocs={n} does not fit {c.name}, which has {c.num_ranks} ranks")
    session = Session(c, detail=resolve_detail(detail, n), algorithm=algorithm, protocol=protocol,
                      numerics=numerics or ("gloo" if c.device.kind == "cpu" else "nccl"))
    sim = session.sim
    rt = RankRuntime(sim, n, execution)
    rt.services["session"] = session
    rt.services["groups"] = GroupRegistry(n)
    rt.services["p2p"] = matcher = P2PMatcher(session)
    rt.services["collectives"] = CollectiveRendezvous(rt)
    try:
        results = rt.run(fn, args)
    except SimcommError as exc:
        exc.simulated_time, exc.finished = sim.now, sorted(rt.finished)
        raise
    unmatched = matcher.unmatched()
    if unmatched:  # NCCL would hang at teardown on these
        shown = "; ".join(unmatched[:8]) + (f"; and {len(unmatched) - 8} more" if len(unmatched) > 8 else "")
        warnings.warn(f"{len(unmatched)} isend/irecv never matched and never waited for (a real job would hang at "
                      f"teardown): {shown}", UnmatchedP2PWarning, stacklevel=2)
    finish = [rt.finished.get(r, sim.now) for r in range(n)]
    return SpawnResult(results, sim.now, finish, sim)
