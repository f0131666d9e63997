"""`import simcomm.distributed as dist`: torch.distributed's functions, run on the simulated cluster."""
from ..algorithms.reduce_ops import ReduceOp
from ..algorithms.reduce_ops import make_premul_sum as _make_nccl_premul_sum
from .api import (GroupMember, P2POp, batch_isend_irecv, destroy_process_group, get_backend, get_global_rank,
                       get_group_rank, get_process_group_ranks, get_rank, get_world_size, group, init_process_group,
                       irecv, is_available, is_initialized, isend, new_group, new_subgroups, recv, send)
from .collectives import (all_gather, all_gather_into_tensor, all_gather_single, all_reduce, all_to_all,
                               all_to_all_single, barrier, broadcast, gather, monitored_barrier, reduce,
                               reduce_scatter, reduce_scatter_single, reduce_scatter_tensor, scatter)
from .groups import ProcessGroup
from .objects import all_gather_object, broadcast_object_list, gather_object, scatter_object_list
from .work import Work

__all__ = ["GroupMember", "P2POp", "ProcessGroup", "ReduceOp", "Work", "_make_nccl_premul_sum", "all_gather",
           "all_gather_into_tensor", "all_gather_object", "all_gather_single", "all_reduce", "all_to_all", "all_to_all_single", "barrier",
           "batch_isend_irecv", "broadcast", "broadcast_object_list", "destroy_process_group", "gather",
           "gather_object", "get_backend", "monitored_barrier", "get_global_rank", "get_group_rank", "get_process_group_ranks", "get_rank",
           "get_world_size", "group", "init_process_group", "irecv", "is_available", "is_initialized", "isend",
           "new_group", "new_subgroups", "recv", "reduce", "reduce_scatter", "reduce_scatter_single",
           "reduce_scatter_tensor", "scatter", "scatter_object_list",
           "send"]
