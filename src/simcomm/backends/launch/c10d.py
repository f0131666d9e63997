"""torch's own process-group bookkeeping, per launched rank, holding the torch ProcessGroups simcomm serves.

torch keeps its groups in `distributed_c10d._world` (the default group, each group's backend, name and global ranks)
and, for the functional collectives DTensor and FSDP2 issue, in a C++ registry of group names. A real rank is a
process with its own; launched ranks are threads of one process, so during a launch `_world` is a `RankWorlds`:
in a rank thread it is that rank's `RankWorld`, elsewhere torch's own. Every group a rank is handed (the default
group, new_group's, a DeviceMesh's) is a `SimProcessGroup` entered there and in the C++ registry under a name of
its own, so torch's own code (DeviceMesh, DTensor, FSDP2, DDP) finds it as it finds a real group.
"""
from __future__ import annotations

import itertools

import torch.distributed as tdist
import torch.distributed.distributed_c10d as c10d
from torch._C import _distributed_c10d as cpp

from ... import distributed as sdist
from .context import RankContext, current_context
from .process_group import SimProcessGroup

_serial = itertools.count()  # C++ group names are process-wide: each launched rank's groups get their own


class RankWorld:
    """What torch's _World holds, for one rank (torch's own keeps part of it in module globals, shared)."""

    def __init__(self):
        self.default_pg = None
        self.pg_map: dict = {}  # group -> (backend name, store)
        self.pg_names: dict = {}
        self.pg_group_ranks: dict = {}  # group -> {global rank: group rank}
        self.pg_backend_config: dict = {}
        self.group_count = 0
        self.tags_to_pg: dict = {}
        self.pg_to_tag: dict = {}
        self.pg_coalesce_state: dict = {}
        self.comms: list = []
        self.pg_config_info: list = []
        self.served: dict = {}  # simcomm group -> its SimProcessGroup
        self.prefix = f"simcomm{next(_serial)}:"


class RankWorlds:
    """distributed_c10d._world during a launch: the calling rank's RankWorld, torch's own outside ranks."""

    def __init__(self, original):
        object.__setattr__(self, "_original", original)

    def _target(self):
        ctx = current_context()
        if ctx is None:
            return self._original
        if ctx.c10d is None:
            ctx.c10d = RankWorld()
        return ctx.c10d

    def __getattr__(self, name):
        return getattr(self._target(), name)

    def __setattr__(self, name, value):
        setattr(self._target(), name, value)


def torch_group(ctx: RankContext, group, backend: str | None = None):
    """The rank's torch ProcessGroup for a simcomm group (made and registered on first use); torch's
    NON_GROUP_MEMBER for simcomm's."""
    if group is sdist.GroupMember.NON_GROUP_MEMBER:
        return c10d.GroupMember.NON_GROUP_MEMBER
    world = RankWorlds._target(None)
    pg = world.served.get(group)
    if pg is None:
        pg = SimProcessGroup(ctx, group)
        name = world.prefix + str(world.group_count)
        pg._set_group_name(name)
        pg._set_group_desc("default_pg" if group is sdist.group.WORLD else group.name)
        cpp._register_process_group(name, pg)
        backend = str(tdist.Backend(backend or sdist.get_backend()))
        world.served[group] = pg
        world.pg_map[pg] = (backend, None)
        world.pg_names[pg] = name
        world.pg_group_ranks[pg] = {g: i for i, g in enumerate(group.ranks)}
        world.pg_backend_config[pg] = backend
        world.tags_to_pg.setdefault("", []).append(pg)
        world.pg_to_tag[pg] = ""
        world.group_count += 1
    return pg


def note_non_member(ranks) -> None:
    """torch's new_group, on a rank outside the group, files the group's ranks under NON_GROUP_MEMBER (each such
    group overwriting the last), so get_process_group_ranks(NON_GROUP_MEMBER) answers the last one's ranks."""
    RankWorlds._target(None).pg_group_ranks[c10d.GroupMember.NON_GROUP_MEMBER] = \
        {g: i for i, g in enumerate(ranks)}


def forget(ctx: RankContext) -> None:
    """Unregister the rank's groups (destroy_process_group, or the rank's end)."""
    world = ctx.c10d
    if world is None:
        return
    for pg in world.served.values():
        cpp._unregister_process_group(pg.group_name)
    ctx.c10d = None
