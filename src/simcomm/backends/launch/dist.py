"""torch.distributed's functions as a launched rank sees them: served by simcomm.distributed.

Each replacement runs simcomm's function when called from a rank thread and torch's own otherwise. Around every
call that may block, the rank's random generators are saved and restored (other ranks run meanwhile, and each real
process has its own generators) and its pending compute is charged first.
"""
from __future__ import annotations

import functools
import pickle

import numpy as np
import torch
import torch.distributed as tdist
import torch.distributed.distributed_c10d as c10d
from torch.futures import Future

from ... import distributed as sdist
from .c10d import forget, note_non_member, torch_group
from .calls import NOT_INITIALIZED, at_backward_end, blocking, in_backward, sim_op
from .context import RankContext, current_context

# Everything simcomm serves under torch's names (torch 2.13 has each of these).
SERVED = ("all_gather", "all_gather_into_tensor", "all_gather_object", "all_gather_single", "all_reduce",
          "all_to_all", "all_to_all_single", "barrier", "batch_isend_irecv", "broadcast", "broadcast_object_list",
          "gather", "gather_object", "get_global_rank", "get_group_rank", "get_process_group_ranks", "get_rank",
          "get_world_size", "irecv", "isend", "monitored_barrier", "new_group", "new_subgroups", "recv", "reduce",
          "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor", "scatter", "scatter_object_list",
          "send")
def _convert(value):
    if isinstance(value, tdist.ProcessGroup) and hasattr(value, "simcomm_group"):  # process_group.SimProcessGroup
        return value.simcomm_group
    if value is c10d.GroupMember.NON_GROUP_MEMBER:
        return sdist.GroupMember.NON_GROUP_MEMBER
    if isinstance(value, (tdist.ReduceOp, tdist.ReduceOp.RedOpType)):
        return sim_op(value)
    if isinstance(value, P2POp):
        return value.simcomm
    if isinstance(value, list) and value and isinstance(value[0], P2POp):
        return [v.simcomm for v in value]
    return value


class LaunchWork(tdist.Work):
    """A torch Work whose wait() first charges the rank's pending compute, keeping its generators as for any call."""

    def __init__(self, work, ctx: RankContext):
        super().__init__()
        self._work, self._ctx = work, ctx

    def wait(self, timeout=None) -> bool:
        with blocking(self._ctx):
            return self._work.wait(timeout)

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def get_future(self) -> Future:
        """A torch Future of the work's output tensors. Asked for during a backward pass (a DDP communication
        hook), it is completed when the pass ends, so the work overlaps the rest of it; otherwise at once."""
        outputs = self._work.get_future()  # raises as torch does where a work has no future (send, recv)
        future = Future()

        def finish():
            with blocking(self._ctx):
                future.set_result(outputs.wait())
        if in_backward():
            at_backward_end(finish)
        else:
            finish()
        return future

    def is_success(self) -> bool:
        return self._work.is_success()

    def result(self):
        self.wait()
        return self._work._event.value

    def __repr__(self) -> str:
        return repr(self._work)


def _require_init(ctx: RankContext, name: str) -> None:
    if not ctx.initialized:
        raise ValueError(NOT_INITIALIZED if name != "destroy_process_group" else "Invalid process group specified")


def served(name: str, original):
    """torch.distributed's `original`, served in a rank by simcomm.distributed's function of the same name."""
    sim_fn = getattr(sdist, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        ctx = current_context()
        if ctx is None:
            return original(*args, **kwargs)
        _require_init(ctx, name)
        args = tuple(_convert(a) for a in args)
        kwargs = {k: _convert(v) for k, v in kwargs.items()}
        with blocking(ctx):
            result = sim_fn(*args, **kwargs)
        if name in _GROUP_MAKERS:
            return _torch_groups(ctx, result, kwargs.get("backend"))
        if isinstance(result, sdist.Work):
            return LaunchWork(result, ctx)
        if isinstance(result, list) and result and isinstance(result[0], sdist.Work):
            return [LaunchWork(w, ctx) for w in result]
        return result
    wrapper.simcomm = sim_fn
    return wrapper


_GROUP_MAKERS = ("new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group")


def _torch_groups(ctx: RankContext, result, backend):
    """What a group-making call returns, with simcomm's groups as the rank's torch ProcessGroups."""
    if isinstance(result, (list, tuple)):
        return type(result)(_torch_groups(ctx, r, backend) for r in result)
    if result is None:
        return None
    if result is sdist.GroupMember.NON_GROUP_MEMBER:
        note_non_member(sdist.get_process_group_ranks(result))
    return torch_group(ctx, result, backend)


class P2POp:
    """torch.distributed.P2POp for a launched rank: op is torch.distributed.isend or irecv (as patched). As
    torch's, it holds its group (the default one when none is given) and its peer both as a global and as a group
    rank (torch's pipelining schedules issue it again from those)."""

    def __init__(self, op, tensor, peer=None, group=None, tag=0, group_peer=None):
        name = getattr(op, "__name__", "")
        if name not in ("isend", "irecv"):
            raise ValueError("Invalid ``op``. Expected ``op`` to be of type ``torch.distributed.isend`` or "
                             "``torch.distributed.irecv``.")
        self.simcomm = sdist.P2POp(getattr(sdist, name), tensor, peer, _convert(group), tag, group_peer)
        simcomm_group = _convert(group) if group is not None else sdist.group.WORLD
        if peer is None and group_peer is not None:
            peer = sdist.get_global_rank(simcomm_group, group_peer)
        elif group_peer is None and peer is not None:
            group_peer = sdist.get_group_rank(simcomm_group, peer)
        self.op, self.tensor, self.peer, self.tag, self.group_peer = op, tensor, peer, tag, group_peer
        self.group = group if group is not None else c10d._world.default_pg


def _in_rank(fn, original):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        ctx = current_context()
        return original(*args, **kwargs) if ctx is None else fn(ctx, *args, **kwargs)
    return wrapper


# ---- process group life cycle ---------------------------------------------------------------------------------
def _init_process_group(ctx: RankContext, backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                        store=None, group_name="", pg_options=None, device_id=None, **kwargs):
    if ctx.initialized:
        raise ValueError("trying to initialize the default process group twice!")
    env = ctx.environ
    if store is None and (init_method is None or str(init_method).startswith("env://")):
        # env:// rendezvous: what torch reads when rank / world_size are not passed
        for var, given in (("MASTER_ADDR", None), ("MASTER_PORT", None), ("RANK", rank),
                           ("WORLD_SIZE", world_size)):
            if given in (None, -1) and var not in env:
                raise ValueError(f"Error initializing torch.distributed using env:// rendezvous: environment "
                                 f"variable {var} expected, but not set")
        if rank in (None, -1):
            rank = int(env["RANK"])
        if world_size in (None, -1):
            world_size = int(env["WORLD_SIZE"])
    with blocking(ctx):
        sdist.init_process_group(backend, init_method, timeout, world_size, rank)
    ctx.initialized = True
    c10d._world.default_pg = torch_group(ctx, sdist.group.WORLD, backend)


def _destroy_process_group(ctx: RankContext, group=None):
    _require_init(ctx, "destroy_process_group")
    if group is None:
        ctx.initialized = False
        forget(ctx)


def _get_backend(ctx: RankContext, group=None):
    _require_init(ctx, "get_backend")
    return tdist.Backend(sdist.get_backend(group))


def _send_object_list(ctx: RankContext, object_list, dst=None, group=None, device=None, group_dst=None,
                      use_batch=False):
    """torch's send_object_list: sizes, then the pickled objects as one byte tensor (use_batch, torch's choice of
    batch_isend_irecv for them, moves the same bytes)."""
    _require_init(ctx, "send_object_list")
    group = _convert(group)
    data = [np.frombuffer(pickle.dumps(o), dtype=np.uint8) for o in object_list]
    with blocking(ctx):
        sdist.send(np.array([len(d) for d in data], dtype=np.int64), dst, group, group_dst=group_dst)
        sdist.send(np.concatenate(data) if data else np.zeros(0, np.uint8), dst, group, group_dst=group_dst)


def _recv_object_list(ctx: RankContext, object_list, src=None, group=None, device=None, group_src=None,
                      use_batch=False):
    _require_init(ctx, "recv_object_list")
    group = _convert(group)
    sizes = np.zeros(len(object_list), dtype=np.int64)
    with blocking(ctx):
        sender = sdist.recv(sizes, src, group, group_src=group_src)
        payload = np.zeros(int(sizes.sum()), dtype=np.uint8)
        sdist.recv(payload, sender, group)
    offset = 0
    for i, size in enumerate(sizes.tolist()):
        object_list[i] = pickle.loads(payload[offset:offset + size].tobytes())
        offset += size
    return sender


def replacements() -> dict:
    """name -> replacement for every torch.distributed attribute a launch patches."""
    out = {name: served(name, getattr(tdist, name)) for name in SERVED}
    simple = {
        "init_process_group": _init_process_group,
        "destroy_process_group": _destroy_process_group,
        "get_backend": _get_backend,
        "is_initialized": lambda ctx: ctx.initialized,
        "is_available": lambda ctx: True,
        "is_gloo_available": lambda ctx: True,
        "is_nccl_available": lambda ctx: ctx.world.gpu,
        "is_torchelastic_launched": lambda ctx: ctx.world.torchrun,
        "get_node_local_rank": lambda ctx, fallback_rank=None: ctx.local_rank,
        "send_object_list": _send_object_list,
        "recv_object_list": _recv_object_list,
    }
    out.update({name: _in_rank(fn, getattr(tdist, name)) for name, fn in simple.items()})
    out["P2POp"] = P2POp
    return out


__all__ = ["LaunchWork", "P2POp", "blocking", "replacements", "served", "torch"]
