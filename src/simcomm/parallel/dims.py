"""ParallelDims: the tp x cp x dp x pp layout of a training job, its rank grid and its process groups, and the
expert grid folded onto the same ranks.

Ranks are placed in Megatron-LM's default order "tp-cp-ep-dp-pp" (parallel_state.py): tensor parallel varies
fastest, so a TP group is adjacent ranks (one node, NVLink), then context, then data, and pipeline outermost. The
grid is one reshaped array: grid[pp, dp, cp, tp] = global rank.

Mixture-of-experts layers fold a second grid onto the same ranks (Megatron-Core's "MoE parallel folding"): expert
tensor parallel (etp, fastest), expert parallel (ep), expert data parallel (edp = world / (etp ep pp)), pipeline
outermost, with the same pipeline groups: expert_grid[pp, edp, ep, etp] = global rank. So an EP group may span the
TP, CP and DP ranks of a stage (attention TP 4 DP 8 with experts ETP 1 EP 32). Experts' gradients are reduced over
their edp group, everything else over dp x cp. Callers index either grid by axis name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from ..errors import SimcommError


class Axis(str, Enum):
    """A parallel dimension (the value is Megatron's short name)."""

    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    EP = "ep"
    ETP = "etp"
    EDP = "edp"


# Grid order, outermost first: the position of each axis in ParallelDims.grid (attention and dense layers) and in
# ParallelDims.expert_grid (the experts).
GRID_ORDER = (Axis.PP, Axis.DP, Axis.CP, Axis.TP)
EXPERT_GRID_ORDER = (Axis.PP, Axis.EDP, Axis.EP, Axis.ETP)
EXPERT_AXES = frozenset((Axis.EP, Axis.ETP, Axis.EDP))


class LayoutError(SimcommError):
    """A parallel layout that cannot be built (sizes that do not divide, do not fit, or are not positive)."""


@dataclass(frozen=True)
class ParallelDims:
    """Sizes of each parallel dimension; dp is derived from world_size when given as 0.

    Megatron-LM's names: tensor_model_parallel_size = tp, pipeline_model_parallel_size = pp,
    context_parallel_size = cp; data parallel size = world_size // (tp * pp * cp); expert_model_parallel_size = ep,
    expert_tensor_parallel_size = etp (0: tp); expert data parallel size edp = world_size // (etp * ep * pp).
    """

    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 0
    world_size: int = 0
    ep: int = 1
    etp: int = 0
    edp: int = field(init=False, default=0)
    grid: np.ndarray = field(init=False, repr=False, compare=False)
    expert_grid: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for name in ("tp", "pp", "cp", "dp", "world_size", "ep", "etp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise LayoutError(f"{name} must be a whole number >= 0, got {v!r}")
        for name in ("tp", "pp", "cp", "ep"):
            if getattr(self, name) < 1:
                raise LayoutError(f"{name} must be at least 1, got {getattr(self, name)}")
        model = self.tp * self.pp * self.cp
        world, dp = int(self.world_size), int(self.dp)
        if dp == 0:
            if world == 0:
                dp = 1
            elif world % model:
                raise LayoutError(f"world size {world} is not divisible by tp x pp x cp = {self.tp} x {self.pp} x "
                                  f"{self.cp} = {model}; data parallel size would be {world / model:g}")
            else:
                dp = world // model
        if world == 0:
            world = model * dp
        if model * dp != world:
            raise LayoutError(f"tp x pp x cp x dp = {self.tp} x {self.pp} x {self.cp} x {dp} = {model * dp} ranks, "
                              f"but world size is {world}")
        object.__setattr__(self, "dp", dp)
        object.__setattr__(self, "world_size", world)
        grid = np.arange(world, dtype=np.int64).reshape(self.pp, dp, self.cp, self.tp)
        grid.flags.writeable = False
        object.__setattr__(self, "grid", grid)
        etp = int(self.etp) or self.tp
        expert = etp * self.ep * self.pp
        if world % expert:
            raise LayoutError(f"world size {world} is not divisible by etp x ep x pp = {etp} x {self.ep} x {self.pp} "
                              f"= {expert}; expert data parallel size would be {world / expert:g}")
        egrid = np.arange(world, dtype=np.int64).reshape(self.pp, world // expert, self.ep, etp)
        egrid.flags.writeable = False
        object.__setattr__(self, "etp", etp)
        object.__setattr__(self, "edp", world // expert)
        object.__setattr__(self, "expert_grid", egrid)

    # ---- Megatron-LM's names -----------------------------------------------------------------------------
    @classmethod
    def from_megatron(cls, world_size: int, tensor_model_parallel_size: int = 1,
                      pipeline_model_parallel_size: int = 1, context_parallel_size: int = 1) -> "ParallelDims":
        return cls(tp=tensor_model_parallel_size, pp=pipeline_model_parallel_size, cp=context_parallel_size,
                   world_size=world_size)

    def size(self, axis: Axis | str) -> int:
        return {Axis.TP: self.tp, Axis.CP: self.cp, Axis.DP: self.dp, Axis.PP: self.pp, Axis.EP: self.ep,
                Axis.ETP: self.etp, Axis.EDP: self.edp}[Axis(axis)]

    # ---- the grids ---------------------------------------------------------------------------------------
    def _grid(self, axes) -> tuple[np.ndarray, tuple[Axis, ...]]:
        """The grid the axes index (the expert grid for ep, etp, edp; pp is in both) and its order."""
        named = {Axis(a) for a in axes}
        if named & EXPERT_AXES:
            if named - EXPERT_AXES - {Axis.PP}:
                raise LayoutError(f"axes {', '.join(sorted(a.value for a in named))} mix the attention grid (tp, cp, "
                                  "dp) with the expert grid (etp, ep, edp)")
            return self.expert_grid, EXPERT_GRID_ORDER
        return self.grid, GRID_ORDER

    def coords(self, rank: int) -> dict[Axis, int]:
        """This rank's index along every axis of the attention grid."""
        if not 0 <= rank < self.world_size:
            raise LayoutError(f"rank {rank} is outside the layout's {self.world_size} ranks")
        return dict(zip(GRID_ORDER, map(int, np.unravel_index(rank, self.grid.shape))))

    def expert_coords(self, rank: int) -> dict[Axis, int]:
        """This rank's index along every axis of the expert grid (pp, edp, ep, etp)."""
        if not 0 <= rank < self.world_size:
            raise LayoutError(f"rank {rank} is outside the layout's {self.world_size} ranks")
        return dict(zip(EXPERT_GRID_ORDER, map(int, np.unravel_index(rank, self.expert_grid.shape))))

    def groups(self, *axes: Axis | str) -> np.ndarray:
        """Every process group along `axes` (one, or several combined, such as dp and cp for the gradient
        reduction): shape (number of groups, group size); each row in group-rank order (the axes in grid order,
        the last one fastest). Expert axes (ep, etp, edp) index the expert grid."""
        grid, order = self._grid(axes)
        ks = sorted(order.index(Axis(a)) for a in axes)
        moved = np.moveaxis(grid, ks, range(len(order) - len(ks), len(order)))
        size = int(np.prod([grid.shape[k] for k in ks]))
        return moved.reshape(-1, size)

    def ranks(self, **coords: int) -> np.ndarray:
        """The ranks at the given coordinates (by axis name: pp=1, tp=0, ...), an array over the other axes in grid
        order: ranks(pp=r) is stage r (dp, cp, tp); ranks(pp=r, dp=0) one replica of it (cp, tp);
        ranks(pp=r, tp=t) the dp x cp ranks that hold the same weights; ranks(pp=r, ep=0) in the expert grid
        (edp, etp)."""
        grid, order = self._grid(coords)
        index = [slice(None)] * len(order)
        for name, i in coords.items():
            index[order.index(Axis(name))] = i
        return grid[tuple(index)]

    def group_of(self, rank: int, axis: Axis | str) -> np.ndarray:
        """The ranks of `rank`'s group along `axis`, in group-rank order."""
        grid, order = self._grid([axis])
        c = self.expert_coords(rank) if order is EXPERT_GRID_ORDER else self.coords(rank)
        index = [c[a] for a in order]
        index[order.index(Axis(axis))] = slice(None)
        return grid[tuple(index)]

    def stage_ranks(self, stage: int) -> np.ndarray:
        """Every rank of pipeline stage `stage` (all dp, cp and tp coordinates)."""
        if not 0 <= stage < self.pp:
            raise LayoutError(f"pipeline stage {stage} is outside 0..{self.pp - 1}")
        return self.grid[stage].reshape(-1)

    # ---- placement on a cluster --------------------------------------------------------------------------
    def placement_notes(self, cluster) -> list[str]:
        """What the layout costs on `cluster`: groups that cross nodes where one would expect them not to."""
        if self.world_size > cluster.num_ranks:
            raise LayoutError(f"the layout needs {self.world_size} ranks; {cluster.name} has {cluster.num_ranks}")
        rpn = cluster.ranks_per_node
        notes = []
        for axis in (Axis.TP, Axis.CP) + ((Axis.ETP,) if self.etp != self.tp else ()):
            groups = self.groups(axis)
            if groups.shape[1] > 1 and (groups // rpn != (groups // rpn)[:, :1]).any():
                notes.append(f"{axis.value} groups of {groups.shape[1]} span nodes ({rpn} ranks per node): their "
                             "collectives cross the network")
        return notes

    def describe(self) -> str:
        experts = f" ep={self.ep} etp={self.etp} edp={self.edp}" if self.ep > 1 or self.etp != self.tp else ""
        return f"tp={self.tp} cp={self.cp} dp={self.dp} pp={self.pp}{experts} ({self.world_size} ranks)"
