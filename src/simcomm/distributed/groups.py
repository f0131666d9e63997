"""Process groups: the world and the subgroups ranks create, with torch's non-member behaviour."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import DistError, MismatchError


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


class GroupRegistry:
    """Groups of one run. new_group is collective: the k-th call on every rank names the same group."""

    def __init__(self, world_size: int):
        self.world = ProcessGroup(tuple(range(world_size)), "WORLD")
        self._calls: dict[int, int] = {}
        self._groups: list[tuple[ProcessGroup, int]] = []  # (group, rank that created it)

    def new_group(self, rank: int, ranks) -> ProcessGroup | _NonMember:
        n = self.world.size()
        members = tuple(range(n)) if ranks is None else tuple(int(r) for r in ranks)
        for r in members:
            if not 0 <= r < n:
                raise DistError(f"Rank {r} is out of range. Valid ranks are 0 to {n - 1}")
        if len(set(members)) != len(members):
            raise DistError(f"new_group got duplicate ranks: {list(ranks)}")
        k = self._calls.get(rank, 0)
        self._calls[rank] = k + 1
        if k == len(self._groups):
            self._groups.append((ProcessGroup(tuple(sorted(members)), f"group{k + 1}"), rank))
        group, creator = self._groups[k]
        if tuple(sorted(members)) != group.ranks:
            raise MismatchError(f"new_group call #{k + 1} disagrees: rank {creator} passed ranks "
                                f"{list(group.ranks)}, rank {rank} passed {sorted(members)}")
        return group if rank in group else NON_GROUP_MEMBER
