"""`import simcomm.distributed as dist`: torch.distributed's functions, run on the simulated cluster.

The names are torch 2.13's (tests/distributed/test_surface.py compares names and signatures with the installed
torch); NOT_SIMULATED lists the torch names simcomm leaves out, and why.
"""
import warnings
from typing import NewType

from ..algorithms.reduce_ops import ReduceOp
from ..algorithms.reduce_ops import make_premul_sum as _make_nccl_premul_sum
from ..errors import DistError
from .api import (GroupMember, P2POp, batch_isend_irecv, destroy_process_group, get_backend, get_global_rank,
                  get_group_rank, get_process_group_ranks, get_rank, get_world_size, group, init_process_group, irecv,
                  is_available, is_initialized, isend, new_group, new_subgroups, new_subgroups_by_enumeration, recv,
                  send, split_group)
from .backend import (Backend, DebugLevel, default_pg_timeout, get_backend_config, get_debug_level,
                      get_default_backend_for_device, get_node_local_rank, get_pg_count, is_backend_available,
                      is_gloo_available, is_mpi_available, is_nccl_available, is_torchelastic_launched,
                      is_ucc_available, is_xccl_available, set_debug_level, set_debug_level_from_env, supports_complex)
from .coalesced import all_gather_coalesced, all_reduce_coalesced
from .collectives import (all_gather, all_gather_into_tensor, all_gather_single, all_reduce, all_to_all,
                          all_to_all_single, barrier, broadcast, gather, monitored_barrier, reduce, reduce_scatter,
                          reduce_scatter_single, reduce_scatter_tensor, scatter)
from .device_mesh import DeviceMesh, init_device_mesh
from .groups import ProcessGroup
from .objects import (all_gather_object, broadcast_object_list, gather_object, recv_object_list, scatter_object_list,
                      send_object_list)
from .work import Work


GroupName = NewType("GroupName", str)  # torch's alias for a group's name
RankType = int  # torch's alias for a rank (int | torch.SymInt there; simcomm has no symbolic ints)


class _DeprecatedReduceOp:
    """torch's deprecated `reduce_op`: ReduceOp's members as attributes, each access warning as torch's does."""

    def __init__(self):
        for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
            object.__setattr__(self, name, getattr(ReduceOp, name))

    def __getattribute__(self, key):
        warnings.warn("`torch.distributed.reduce_op` is deprecated, please use `torch.distributed.ReduceOp` instead",
                      FutureWarning, stacklevel=2)
        return object.__getattribute__(self, key)


reduce_op = _DeprecatedReduceOp()


class DistBackendError(DistError):
    """torch's error for a failure inside a backend."""


class DistNetworkError(DistError):
    """torch's error for a network failure (a simulated network does not fail)."""


class DistStoreError(DistError):
    """torch's error for a store failure (simcomm has no store)."""


# torch.distributed's public names that simcomm leaves out, with the reason (the surface test keeps this current).
NOT_SIMULATED = {
    **dict.fromkeys(["AllToAllOptions", "AllreduceCoalescedOptions", "AllreduceOptions", "BarrierOptions",
                     "BroadcastOptions", "GatherOptions", "ReduceOptions", "ReduceScatterOptions", "ScatterOptions",
                     "BackendConfig", "ProcessGroupGloo"], "backend-internal option and class objects"),
    **dict.fromkeys(["Store", "TCPStore", "FileStore", "HashStore", "PrefixStore", "QueueEmptyError",
                     "register_rendezvous_handler", "rendezvous"], "rendezvous stores: simcomm.spawn needs none"),
    **dict.fromkeys(["Reducer", "GradBucket", "BuiltinCommHookType", "Logger"], "DistributedDataParallel internals"),
    "breakpoint": "a debugger for real processes", "log": "torch's logger", "record_comm": "profiler hook",
    "timedelta": "datetime.timedelta re-exported by torch",
    "shrink_group": "experimental fault tolerance (ranks that died): simulated ranks do not die",
}

__all__ = sorted(n for n in dir() if not n.startswith("__") and n not in ("annotations", "api", "backend",
                 "coalesced", "collectives", "device_mesh", "groups", "objects", "work", "runtime", "tensors",
                 "rendezvous", "p2p", "clock", "spawn", "NOT_SIMULATED", "warnings", "NewType",
                 "_DeprecatedReduceOp"))
