"""What every served call of a launched rank shares: bracketing a call that may block, backward-pass hooks, and
torch's ReduceOp as simcomm's."""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as tdist
from torch.autograd import Variable

from ...algorithms.reduce_ops import ReduceOp as SimReduceOp
from ...algorithms.reduce_ops import make_premul_sum
from .compute import flush
from .context import RankContext

NOT_INITIALIZED = ("Default process group has not been initialized, please make sure to call "
                   "init_process_group.")


@contextmanager
def blocking(ctx: RankContext):
    """Bracket a call during which other ranks may run: keep this rank's generators, charge its compute first."""
    ctx.save_rng()
    try:
        flush(ctx)
        yield
    finally:
        ctx.restore_rng()


def in_backward() -> bool:
    """True while an autograd backward pass runs on the calling thread."""
    return torch._C._current_graph_task_id() != -1


def at_backward_end(fn) -> None:
    """Run fn when the running backward pass ends, after its last gradient hook, before later-queued callbacks."""
    Variable._execution_engine.queue_callback(fn)


def sim_op(op):
    """torch's ReduceOp (or its RedOpType member) as simcomm's."""
    if isinstance(op, SimReduceOp):
        return op
    if isinstance(op, tdist.ReduceOp.RedOpType):
        return getattr(SimReduceOp, op.name)
    if isinstance(op, tdist.ReduceOp):
        if getattr(op, "op", None) == tdist.ReduceOp.RedOpType.PREMUL_SUM:  # made by _make_nccl_premul_sum
            return make_premul_sum(op.factor)
        for member in tdist.ReduceOp.RedOpType.__members__.values():
            if op == member:
                return getattr(SimReduceOp, member.name)
        raise ValueError(f"ReduceOp {op!r} is not supported by simcomm launch")
    return op
