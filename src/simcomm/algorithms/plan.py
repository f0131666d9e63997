"""A collective as a plan: a generator that yields steps of transfers and, between steps, moves the real data.

One lowering path: the executor times each yielded step on the engine, then resumes the plan, which applies the
same step to the numpy buffers (when there are any). Timing and numerics cannot disagree about what happened.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import numpy as np

from ..vocab import PER_RANK_SHARD
from .reduce_ops import ReduceOp, combine


@dataclass
class Step:
    """Flows src[i] -> dst[i] (group ranks) of nbytes[i]; `reduce` marks that each dst reduces what it receives."""

    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    reduce: bool = False
    label: str = ""
    # Explicit link paths instead of rank-to-rank routes (in-switch reduction goes GPU -> switch -> GPU).
    routes: np.ndarray | None = None
    # Ranks that only reduce locally this step (no transfer), with the bytes they reduce.
    local_reduce: tuple[np.ndarray, np.ndarray] | None = None
    # weight[i] identical flows travel as flow i (multi-channel algorithms repeat the same pair).
    weight: np.ndarray | None = None
    # Dependency chains when flows are merged across channels: (channel, src, dst, index of the merged flow), and
    # optionally the channel whose clock the sender reads when it is not the one written at the receiver.
    # Latency accumulates per (channel, rank); without chains every flow is its own chain on channel 0.
    chains: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    # The step happens this many times back to back (identical flows, sizes and chains): the executor times a
    # run of repeats in closed form, and the plan moves the data of all of them before yielding again.
    repeat: int = 1
    # Repeats that rotate the sizes instead of repeating them: repeat j (from 0) sends nbytes[(i + j*rotate) % k]
    # on flow i (a ring's uneven chunks moving one rank per stage); the executor times them (rotation.py).
    rotate: int = 0

    def rotated(self, j: int) -> "Step":
        """Repeat j (from 0) of a rotating step as a step of its own (the same flow arrays)."""
        return replace(self, nbytes=np.roll(self.nbytes, -j * self.rotate), rotate=0)


def step(src, dst, nbytes, reduce: bool = False, label: str = "", weight=None, chains=None,
         repeat: int = 1, rotate: int = 0) -> Step:
    # Keep the caller's 1-D arrays as they are: the engine recognises a plan repeating its flows by identity.
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    src, dst = (src if src.ndim == 1 else src.ravel()), (dst if dst.ndim == 1 else dst.ravel())
    nb = np.full(src.shape, float(nbytes)) if np.isscalar(nbytes) else \
        np.broadcast_to(np.asarray(nbytes, dtype=np.float64), src.shape).copy()
    return Step(src, dst, nb, reduce, label, weight=weight, chains=chains, repeat=repeat, rotate=rotate)


@dataclass(frozen=True)
class Placement:
    """Where a collective runs, which decides its schedule: the cluster (NVLS routes through its switches), ranks
    per node (rings snake through nodes, trees and hierarchical algorithms group by node) and channels (NCCL runs
    one ring or tree per NIC rail across nodes; inside one node one suffices).

    A Collective without a placement is scheduled as if its ranks shared one flat switch: one channel, no nodes.
    These channels are the plan's distinct rings and trees (one per NIC rail); the CTAs its kernel holds on each
    GPU, NCCL's channel count, are channels.collective_channels.
    """

    cluster: object | None = None
    ranks_per_node: int | None = None
    channels: int = 1
    protocol: str = ""  # the NCCL protocol it runs under (a tree uses fewer channels for small buffers by it)

    @classmethod
    def on(cls, cluster) -> "Placement":
        channels = max(1, len(cluster.template.nics)) if cluster.num_nodes > 1 else 1
        return cls(cluster, cluster.ranks_per_node, channels)


FLAT = Placement()


@dataclass(frozen=True)
class GroupShape:
    """How a group sits on its cluster's nodes: nodes touched, the most ranks on one node, and the local ranks
    of the first node it touches."""

    nodes: int
    ppn: int
    first_local: np.ndarray


_SHAPES: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def group_shape(cluster, ranks: np.ndarray) -> GroupShape:
    """GroupShape of `ranks` on `cluster`, remembered per cluster (the tuner weighs a dozen candidates per
    collective, and a training step repeats its groups)."""
    ranks = np.asarray(ranks, dtype=np.int64)
    memo = _SHAPES.setdefault(cluster, {})
    key = ranks.tobytes()
    shape = memo.get(key)
    if shape is None:
        rpn = cluster.ranks_per_node
        node_of = ranks // rpn
        nodes, counts = np.unique(node_of, return_counts=True)
        shape = GroupShape(len(nodes), int(counts.max()), ranks[node_of == nodes[0]] % rpn)
        if len(memo) >= 1024:
            memo.clear()
        memo[key] = shape
    return shape


def channel_stride(per_node: int, channels: int) -> int:
    """Local ranks between two channels' crossing points: with fewer channels (NICs) than ranks per node, channel
    c crosses nodes at local rank c x this, so each channel leaves through a NIC of its own, as NCCL spreads its
    rings and trees over the NICs."""
    return max(1, per_node // max(1, channels))


@dataclass
class Collective:
    """A group-level collective request: what, over which ranks, how big, and where (its placement).

    `count` is elements per rank: the whole tensor for all_reduce, broadcast and reduce; one shard (the output
    of reduce_scatter/scatter, the input of all_gather/gather) otherwise; for all_to_all the per-peer block, or
    `splits[i][j]` elements from group rank i to j when uneven.
    """

    kind: str
    ranks: np.ndarray
    count: int
    dtype: np.dtype = field(default_factory=lambda: np.dtype("float32"))
    op: ReduceOp = field(default_factory=lambda: ReduceOp.SUM)
    root: int = 0
    splits: np.ndarray | None = None
    variant: str = ""  # "list" for torch's list reduce_scatter (gloo reduces each block on its own)
    placement: Placement = FLAT

    def __post_init__(self):
        self.ranks = np.asarray(self.ranks, dtype=np.int64)
        self.dtype = np.dtype(self.dtype)

    def placed(self, cluster) -> "Collective":
        """This collective placed on `cluster` (a copy; self is unchanged)."""
        return replace(self, placement=Placement.on(cluster))

    @property
    def n(self) -> int:
        return len(self.ranks)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """nccl-tests' S: the size that algbw divides (count*typesize, times n for gather-like collectives)."""
        if self.kind in PER_RANK_SHARD:
            if self.splits is not None:
                return int(self.splits.sum(axis=1).max()) * self.itemsize
            return self.count * self.n * self.itemsize
        return self.count * self.itemsize


class Buffers:
    """The data a plan works on: one row per group rank, or nothing for size-only runs.

    `op` is the operator; premultiplied inputs and the final AVG division are handled by the caller. The rows may
    come as `sources`, one read-only 1-D array per group rank (the ranks' own tensors): a plan that can reduce
    straight from them (gloo's and NCCL's rings) never copies every rank's data; `rows` stacks them on first use.
    """

    def __init__(self, rows: np.ndarray | None, op: ReduceOp, sources: list[np.ndarray] | None = None):
        self._rows = rows
        self.op = op
        self.sources = sources

    @property
    def rows(self) -> np.ndarray | None:
        if self._rows is None and self.sources is not None:
            self._rows = np.stack(self.sources)
        return self._rows

    @rows.setter
    def rows(self, value: np.ndarray | None) -> None:
        self._rows = value

    @property
    def live(self) -> bool:
        return self._rows is not None or self.sources is not None

    @property
    def unstacked(self) -> bool:
        """Whether the data is still only the ranks' own arrays (sources), never copied into rows."""
        return self._rows is None and self.sources is not None

    def reduce_into(self, dst_idx, src_values) -> None:
        """rows[dst_idx] = rows[dst_idx] (op) src_values, where dst_idx is a numpy index expression."""
        self.rows[dst_idx] = combine(self.op, self.rows[dst_idx], src_values)


Plan = Callable[[Collective, Buffers], Iterator[Step]]
