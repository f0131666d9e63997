"""Process-group queries, groups and point-to-point calls, with torch.distributed's names and argument order."""
from __future__ import annotations

from ..errors import DistError
from .groups import NON_GROUP_MEMBER, ProcessGroup, as_rank
from .runtime import current
from .tensors import tensor_arg
from .work import Work


class _GroupNamespace:
    """`dist.group.WORLD` as in torch: resolved per run."""

    @property
    def WORLD(self) -> ProcessGroup:  # noqa: N802 - torch's spelling
        rt, _ = current()
        return rt.services["groups"].world


group = _GroupNamespace()


class GroupMember:
    NON_GROUP_MEMBER = NON_GROUP_MEMBER

    @property
    def WORLD(self):  # noqa: N802
        return group.WORLD


def resolve_group(g) -> ProcessGroup | None:
    """The group a call targets; None for a non-member marker."""
    rt, _ = current()
    if g is None:
        return rt.services["groups"].world
    if g is NON_GROUP_MEMBER:
        return None
    if not isinstance(g, ProcessGroup):
        raise DistError(f"group must be a ProcessGroup made by new_group (or None for the world), got {g!r}")
    return g


def resolve_peer(g: ProcessGroup, peer, group_peer, name: str, required: bool = True) -> int | None:
    """A global rank from torch's pair (peer, group_peer): exactly one may be given."""
    if peer is not None and group_peer is not None:
        raise DistError(f"Can not specify both {name} and group_{name}")
    if peer is None and group_peer is None:
        if required:
            raise DistError(f"Must specify either {name} or group_{name}")
        return None
    if group_peer is not None:
        group_peer = as_rank(group_peer, f"group_{name}")
        if not 0 <= group_peer < g.size():
            raise DistError(f"group_{name} {group_peer} is out of range: {g.name} has group ranks 0 to {g.size() - 1}")
        return g.ranks[group_peer]
    rt, _ = current()
    n = rt.nprocs
    peer = as_rank(peer, name)
    if not 0 <= peer < n:
        raise DistError(f"{name} {peer!r} is out of range: valid ranks are 0 to {n - 1}")
    if peer not in g:
        raise DistError(f"{name} {peer} is not a member of {g.name} (ranks {list(g.ranks)})")
    return peer


# ---- setup and queries -----------------------------------------------------------------------------------
def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                       group_name="", pg_options=None, device_id=None, _ranks=None) -> None:
    """Accepted for source compatibility (inside simcomm.spawn the group already exists); remembers the backend
    asked for ("nccl", "gloo", "cpu:gloo,cuda:nccl", ...) so get_backend() answers as torch would."""
    rt, me = current()
    if world_size not in (-1, None) and world_size != rt.nprocs:
        raise DistError(f"init_process_group(world_size={world_size}) but simcomm.spawn started {rt.nprocs} ranks")
    if rank not in (-1, None) and rank != me:
        raise DistError(f"init_process_group(rank={rank}) called by rank {me}")
    if backend is not None:
        rt.services.setdefault("backends", {})[me] = str(backend).lower()


def destroy_process_group(group=None) -> None:
    """Accepted for source compatibility; nothing to tear down."""


def is_initialized() -> bool:
    try:
        current()
        return True
    except Exception:  # noqa: BLE001
        return False


def is_available() -> bool:
    return True


def get_backend(group=None) -> str:
    """The backend this rank asked init_process_group for; without one, torch's default for the cluster's
    devices ("nccl" on GPUs, "gloo" on CPUs)."""
    rt, me = current()
    asked = rt.services.get("backends", {}).get(me)
    if asked:
        return asked
    return "gloo" if rt.sim.cluster.device.kind == "cpu" else "nccl"


def backend_rules(numerics: str) -> str:
    """Whose argument rules the calling rank's collectives follow, "gloo" or "nccl": the backend it asked
    init_process_group for (from a list such as "cpu:gloo,cuda:nccl", the one for the cluster's devices), else
    the run's numerics (which follow the cluster's devices unless a scenario says otherwise)."""
    rt, me = current()
    asked = rt.services.get("backends", {}).get(me, "")
    if ":" in asked:
        device = "cpu" if rt.sim.cluster.device.kind == "cpu" else "cuda"
        asked = dict(p.split(":", 1) for p in asked.split(",") if ":" in p).get(device, "")
    return asked if asked in ("gloo", "nccl") else numerics


def get_rank(group=None) -> int:
    """This rank's rank in group (global by default); -1 if it is not a member."""
    rt, me = current()
    g = resolve_group(group)
    return -1 if g is None else g.rank_of(me)


def get_world_size(group=None) -> int:
    """Size of group (the world by default); -1 for a non-member."""
    g = resolve_group(group)
    return -1 if g is None else g.size()


def _registered(group) -> ProcessGroup:
    """The group for a query that needs its ranks; non-members hold no group, as in torch (a ValueError)."""
    g = resolve_group(group)
    if g is None:
        raise DistError(f"Group {group!r} is not registered, please create group with torch.distributed.new_group "
                        f"API (this rank is not a member of the group)")
    return g


def get_group_rank(group, global_rank: int) -> int:
    g = _registered(group)
    r = g.rank_of(as_rank(global_rank, "global_rank"))
    if r < 0:
        raise DistError(f"Global rank {global_rank} is not part of group {g.name}")
    return r


def get_global_rank(group, group_rank: int) -> int:
    g = _registered(group)
    group_rank = as_rank(group_rank, "group_rank")
    if not 0 <= group_rank < g.size():
        raise DistError(f"Group rank {group_rank} is not part of group {g.name}")
    return g.ranks[group_rank]


def get_process_group_ranks(group) -> list[int]:
    """Global ranks of the group, in group-rank order. Given GroupMember.NON_GROUP_MEMBER (what new_group hands a
    rank outside the group), the ranks of the last group this rank was left out of, as torch answers."""
    if group is NON_GROUP_MEMBER:
        rt, me = current()
        left_out = rt.services["groups"].left_out.get(me)
        if left_out is not None:
            return list(left_out)
    return list(_registered(group).ranks)


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, use_local_synchronization=False,
              group_desc=None, device_id=None, sort_ranks=True):
    """A subgroup; every rank must call it in the same order (only its members, with use_local_synchronization).
    Non-members get GroupMember.NON_GROUP_MEMBER. sort_ranks=False keeps the order given (group rank i is
    ranks[i])."""
    rt, me = current()
    return rt.services["groups"].new_group(me, ranks, bool(sort_ranks), bool(use_local_synchronization))


def new_subgroups(group_size=None, group=None, timeout=None, backend=None, pg_options=None, group_desc=None):
    """Split group (the world by default) into consecutive groups of group_size (default: ranks per node);
    returns (my subgroup, all subgroups)."""
    rt, me = current()
    ranks = get_process_group_ranks(group if group is not None else rt.services["groups"].world)
    size = rt.sim.cluster.ranks_per_node if group_size is None else as_rank(group_size, "group_size")
    if size <= 0:
        raise DistError(f"The arg 'group_size' ({size}) must be positive")
    if len(ranks) < size:
        raise DistError(f"The arg 'group_size' ({size}) must not exceed the world size ({len(ranks)})")
    if len(ranks) % size:
        raise DistError(f"The world size ({len(ranks)}) must be divisible by 'group_size={size}'")
    return new_subgroups_by_enumeration([ranks[i:i + size] for i in range(0, len(ranks), size)], timeout, backend,
                                        pg_options, group_desc)


def new_subgroups_by_enumeration(ranks_per_subgroup_list, timeout=None, backend=None, pg_options=None,
                                 group_desc=None):
    """One new group per list of ranks (they must not overlap); returns (my subgroup or None, all subgroups)."""
    if not ranks_per_subgroup_list:
        raise DistError("The arg 'ranks_per_subgroup_list' cannot be empty")
    _, me = current()
    seen: dict[int, list] = {}
    mine, subgroups = None, []
    for ranks in ranks_per_subgroup_list:
        subgroup = new_group(ranks, timeout, backend, pg_options, group_desc=group_desc)
        subgroups.append(subgroup)
        for r in ranks:
            if r in seen:
                raise DistError(f"Rank {r} has appeared in both subgroup {seen[r]} and {list(ranks)}")
            seen[r] = list(ranks)
            if r == me:
                mine = subgroup
    return mine, subgroups


def split_group(parent_pg=None, split_ranks=None, timeout=None, pg_options=None, group_desc=None, backend=None):
    """Split parent_pg (the world by default) by lists of its GROUP ranks; returns this rank's new group, or None
    when it is in no split. Every rank of the parent group must call it with the same splits."""
    if not split_ranks:
        raise DistError("split_ranks cannot be None or empty")
    _, me = current()
    parent = _registered(parent_pg)
    mine = None
    for split in split_ranks:
        ranks = [get_global_rank(parent, as_rank(r, "split_group: each rank")) for r in split]
        g = new_group(ranks, timeout, backend, pg_options, use_local_synchronization=True, group_desc=group_desc)
        if me in ranks:
            mine = g
    return mine


# ---- point to point --------------------------------------------------------------------------------------
def _p2p(kind: str, tensor, peer, g, tag, group_peer):
    rt, me = current()
    grp = resolve_group(g)
    if grp is None:
        raise DistError(f"rank {me} called {kind} on a group it is not a member of")
    name = "dst" if kind == "send" else "src"
    target = resolve_peer(grp, peer, group_peer, name, required=(kind == "send"))
    if target == me:
        raise DistError(f"Invalid {name} rank: rank {me} cannot {kind} {'to' if kind == 'send' else 'from'} itself")
    tag = as_rank(tag, "tag")
    arg = tensor_arg(tensor, kind, output=kind == "recv", contiguous=True)
    matcher = rt.services["p2p"]
    tags = rt.tags.get(me)
    if kind == "send":
        event = matcher.post_send(me, target, tag, arg, tags, rt.device_busy(me))
        what = f"send(dst={target}{f', tag={tag}' if tag else ''}, {arg.nbytes} B)"
    else:
        event = matcher.post_recv(me, target, tag, arg, tags)
        what = f"recv(src={'any' if target is None else target}{f', tag={tag}' if tag else ''})"
    return rt, me, event, what


def send(tensor, dst=None, group=None, tag=0, group_dst=None) -> None:
    """Send tensor to global rank dst; returns when the data has arrived."""
    rt, me, event, what = _p2p("send", tensor, dst, group, tag, group_dst)
    rt.wait(me, event, what)


def recv(tensor, src=None, group=None, tag=0, group_src=None) -> int:
    """Receive into tensor from src (any source if None); returns the sender's global rank."""
    rt, me, event, what = _p2p("recv", tensor, src, group, tag, group_src)
    return rt.wait(me, event, what)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None) -> Work:
    rt, me, event, what = _p2p("send", tensor, dst, group, tag, group_dst)
    return Work(rt, me, event, what)


def irecv(tensor, src=None, group=None, tag=0, group_src=None) -> Work:
    rt, me, event, what = _p2p("recv", tensor, src, group, tag, group_src)
    return Work(rt, me, event, what)


class P2POp:
    """One send or recv for batch_isend_irecv: op is isend or irecv (the functions of this module)."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        if op not in (isend, irecv):
            raise DistError("P2POp op must be simcomm.distributed.isend or simcomm.distributed.irecv")
        self.op, self.tensor, self.peer, self.group, self.tag, self.group_peer = op, tensor, peer, group, tag, group_peer


def batch_isend_irecv(p2p_op_list) -> list[Work]:
    """Post every op at once (so their order cannot deadlock) and return their Works."""
    if not p2p_op_list:
        raise DistError("batch_isend_irecv needs a non-empty list of P2POp")
    return [op.op(op.tensor, op.peer, op.group, op.tag, op.group_peer) for op in p2p_op_list]
