"""Process groups: the world and the subgroups ranks create, with torch's non-member behaviour."""
from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass, field

import numpy as np

from ..errors import DistError, MismatchError
from .runtime import current


@dataclass(frozen=True, eq=False)
class ProcessGroup:
    """An ordered set of global ranks. Group rank i is global rank `ranks[i]`."""

    ranks: tuple[int, ...]
    name: str
    _index: dict = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_index", {r: i for i, r in enumerate(self.ranks)})

    def size(self) -> int:
        return len(self.ranks)

    def rank(self) -> int:
        """The calling rank's rank in this group (-1 if it is not a member), as torch's ProcessGroup.rank()."""
        return self.rank_of(current()[1])

    def rank_of(self, global_rank: int) -> int:
        """Group rank of a global rank, -1 if it is not a member."""
        return self._index.get(global_rank, -1)

    def __contains__(self, global_rank: int) -> bool:
        return global_rank in self._index

    def __repr__(self) -> str:
        return f"ProcessGroup({self.name}, ranks={list(self.ranks)})"


class _NonMember:
    """What new_group hands to ranks outside the group (torch's GroupMember.NON_GROUP_MEMBER)."""

    name = "NON_GROUP_MEMBER"

    def __repr__(self) -> str:
        return "GroupMember.NON_GROUP_MEMBER"


NON_GROUP_MEMBER = _NonMember()


def as_rank(value, what: str) -> int:
    """An integer-like rank as int: int, numpy integer, or a one-element integer array or tensor (torch.tensor(0);
    torch accepts each); a DistError naming `what` for bools, floats (torch's float tensors included, which torch
    would truncate) and anything else."""
    dtype = str(getattr(value, "dtype", ""))
    if isinstance(value, (bool, np.bool_)) or dtype in ("bool", "torch.bool"):
        raise DistError(f"{what} must be an integer, got {value!r}")
    if not isinstance(value, numbers.Integral):
        try:
            return operator.index(value.reshape(()) if getattr(value, "size", None) == 1 and dtype else value)
        except (TypeError, ValueError, RuntimeError):
            raise DistError(f"{what} must be an integer, got {value!r}") from None
    return int(value)


class GroupRegistry:
    """Groups of one run. new_group is collective: the k-th call on every rank names the same group (with
    use_local_synchronization, only the members call it: the k-th such call of the members for the same ranks)."""

    def __init__(self, world_size: int):
        self.world = ProcessGroup(tuple(range(world_size)), "WORLD")
        self._calls: dict[int, int] = {}
        self._groups: list[tuple[ProcessGroup, int]] = []  # (group, rank that created it)
        self._local_calls: dict[tuple[int, tuple], int] = {}
        self._local: dict[tuple, list[ProcessGroup]] = {}
        # rank -> the ranks of the last group it was left out of: torch files each such group's ranks under
        # NON_GROUP_MEMBER, so get_process_group_ranks(NON_GROUP_MEMBER) answers the last one's
        self.left_out: dict[int, tuple[int, ...]] = {}

    def count(self) -> int:
        """Groups made so far, the world included."""
        return 1 + len(self._groups) + sum(len(v) for v in self._local.values())

    def members(self, ranks) -> tuple[int, ...]:
        """Checked global ranks of a new group, in the order given."""
        n = self.world.size()
        if ranks is None:
            return tuple(range(n))
        if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
            raise DistError(f"new_group: ranks must be a list of integer ranks, got {ranks!r}")
        members = tuple(as_rank(r, "new_group: each rank") for r in ranks)
        for r in members:
            if not 0 <= r < n:
                raise DistError(f"Rank {r} is out of range. Valid ranks are 0 to {n - 1}")
        if len(set(members)) != len(members):
            raise DistError(f"new_group got duplicate ranks: {list(members)}")
        return members

    def new_group(self, rank: int, ranks, sort_ranks: bool = True, local: bool = False):
        members = self.members(ranks)
        if sort_ranks:
            members = tuple(sorted(members))
        if local:
            return self._new_local(rank, members)
        k = self._calls.get(rank, 0)
        self._calls[rank] = k + 1
        if k == len(self._groups):
            self._groups.append((ProcessGroup(members, f"group{k + 1}"), rank))
        group, creator = self._groups[k]
        if members != group.ranks:
            raise MismatchError(f"rank {rank}: new_group call #{k + 1} disagrees: rank {creator} passed ranks "
                                f"{list(group.ranks)}, rank {rank} passed {list(members)}")
        if rank in group:
            return group
        self.left_out[rank] = group.ranks
        return NON_GROUP_MEMBER

    def _new_local(self, rank: int, members: tuple[int, ...]):
        """use_local_synchronization=True: only members take part; non-members get the non-member marker."""
        if rank not in members:
            return NON_GROUP_MEMBER
        key = tuple(sorted(members))
        k = self._local_calls.get((rank, key), 0)
        self._local_calls[(rank, key)] = k + 1
        made = self._local.setdefault(key, [])
        if k == len(made):
            made.append(ProcessGroup(members, f"group[{','.join(map(str, key))}]#{k + 1}"))
        if made[k].ranks != members:
            raise MismatchError(f"rank {rank}: new_group(use_local_synchronization=True) call #{k + 1} for ranks "
                                f"{list(key)} disagrees on their order: {list(made[k].ranks)} and {list(members)}")
        return made[k]
