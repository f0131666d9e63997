"""A rank's communication and compute clock, over simcomm.distributed (simulated) or torch.distributed (real).

Numeric training talks to its peers only through `RankComm`: the same calls run on the simulator (numpy arrays
or size-only tensors; the kernels the model runs are charged as compute time (numeric_compute.py) before each
communication, so the timeline shows compute and communication in order) and on real torch.distributed (numpy
arrays shared with CPU torch tensors; no clock). Calls return their results rather than writing in place, so callers never
depend on which backend reduced where. `tagged` labels everything started inside it (simulator only).
"""
from __future__ import annotations

import contextlib

import numpy as np

from .. import distributed as simdist
from ..distributed import clock
from ..distributed.runtime import current
from ..errors import SimcommError
from .model.layers import Flops
from .model.tensor import Meta, as_meta, concat, is_meta

_OPS = ("sum", "max", "min")


class Handle:
    """An asynchronous call in flight: wait() returns its result."""

    def __init__(self, comm: "RankComm", work, result, finish=None):
        self._comm, self._work, self._result, self._finish = comm, work, result, finish
        self._done = False

    def wait(self):
        if not self._done:
            self._comm.flush()
            if self._work is not None:
                self._work.wait()
            if self._finish is not None:
                self._result = self._finish()
            self._done = True
        return self._result


class RankComm:
    """Collectives, point-to-point and compute for one rank. `dist` is simcomm.distributed (default) or
    torch.distributed; groups come from `new_group` (every rank calls it for every group, in the same order)."""

    def __init__(self, dist=None):
        self.dist = dist or simdist
        self.simulated = self.dist is simdist
        self.fl = Flops()  # matrix products counted (reported; the time comes from `kernels`)
        self.kernels = None  # KernelCharges: the seconds of the kernels run since the last flush
        self.rank = self.dist.get_rank()
        self.world_size = self.dist.get_world_size()
        if not self.simulated:
            import torch
            self._torch = torch

    # ---- time and labels ---------------------------------------------------------------------------------
    def device(self):
        """The simulated device this rank runs on (simulator only)."""
        return current()[0].sim.cluster.device

    def flush(self) -> None:
        """Queue the kernels charged since the last flush as compute on this rank's device (simulator only), as
        kernels on a GPU stream: the program goes on, and the rank's next communication waits for them."""
        self.fl.take()
        seconds = self.kernels.take() if self.kernels is not None else 0.0
        if self.simulated and seconds > 0:
            clock.compute(seconds=seconds, label="compute", wait=False)

    def synchronize(self) -> None:
        """Flush, and wait until this rank's queued compute has run."""
        self.flush()
        if self.simulated:
            clock.synchronize()

    def tagged(self, **tags):
        """Tag everything started inside the block (compute, p2p, collectives); flushes compute at both ends."""
        if not self.simulated:
            return contextlib.nullcontext()
        return _Tagged(self, tags)

    def new_group(self, ranks):
        return self.dist.new_group(list(map(int, ranks)))

    # ---- conversions -------------------------------------------------------------------------------------
    def _t(self, x):
        """What the backend takes: the array itself (simcomm) or a torch tensor sharing its memory."""
        if self.simulated:
            return x
        if is_meta(x):
            raise SimcommError("size-only tensors run on the simulator only, not on real torch.distributed")
        return self._torch.from_numpy(x)

    def _op(self, op: str):
        if op not in _OPS:
            raise SimcommError(f"reduce op must be one of {', '.join(_OPS)}, got {op!r}")
        return getattr(self.dist.ReduceOp, op.upper())

    @staticmethod
    def _buffer(x):
        return as_meta(x) if is_meta(x) else np.array(x, copy=True, order="C")

    @staticmethod
    def _empty(shape, like):
        return Meta(tuple(shape), like.dtype) if is_meta(like) else np.empty(shape, like.dtype)

    # ---- collectives -------------------------------------------------------------------------------------
    def _run(self, call, result, async_op, finish=None):
        self.flush()
        work = call(async_op)
        if async_op:
            return Handle(self, work, result, finish)
        return finish() if finish is not None else result

    def all_reduce(self, x, group, op: str = "sum", async_op: bool = False):
        """The reduction of x over the group (a new array)."""
        buf = self._buffer(x)
        return self._run(lambda a: self.dist.all_reduce(self._t(buf), op=self._op(op), group=group, async_op=a),
                         buf, async_op)

    def all_gather(self, x, group, size: int, async_op: bool = False):
        """Every member's x concatenated along axis 0, in group-rank order (all_gather_into_tensor)."""
        src = self._buffer(x)
        out = self._empty((size * x.shape[0],) + tuple(x.shape[1:]), x)
        gather = getattr(self.dist, "all_gather_single", None) or self.dist.all_gather_into_tensor
        return self._run(lambda a: gather(self._t(out), self._t(src), group=group, async_op=a), out, async_op)

    def reduce_scatter(self, x, group, size: int, async_op: bool = False):
        """This member's block (axis 0 cut in `size` equal parts) of the sum of x over the group."""
        if x.shape[0] % size:
            raise SimcommError(f"reduce_scatter: axis 0 of length {x.shape[0]} does not split over {size} ranks")
        src = self._buffer(x)
        out = self._empty((x.shape[0] // size,) + tuple(x.shape[1:]), x)
        scatter = getattr(self.dist, "reduce_scatter_single", None) or self.dist.reduce_scatter_tensor
        return self._run(lambda a: scatter(self._t(out), self._t(src), group=group, async_op=a), out, async_op)

    def all_to_all(self, x, group, send_splits, recv_splits, async_op: bool = False):
        """Rows of x (axis 0) cut into send_splits, block j to group rank j; returns the blocks received from each
        member, concatenated in group-rank order (recv_splits rows each): all_to_all_single with split sizes."""
        send, recv = [int(n) for n in send_splits], [int(n) for n in recv_splits]
        if sum(send) != x.shape[0]:
            raise SimcommError(f"all_to_all: send_splits {send} do not add up to the {x.shape[0]} rows to send")
        src = self._buffer(x)
        out = self._empty((sum(recv),) + tuple(x.shape[1:]), x)
        return self._run(lambda a: self.dist.all_to_all_single(self._t(out), self._t(src), recv, send, group=group,
                                                               async_op=a), out, async_op)

    # ---- point to point ----------------------------------------------------------------------------------
    def isend(self, x, dst: int, tag: int = 0) -> Handle:
        buf = self._buffer(x)
        self.flush()
        return Handle(self, self.dist.isend(self._t(buf), dst=int(dst), tag=tag), None)

    def irecv(self, shape, like, src: int, tag: int = 0) -> Handle:
        """Receive a tensor of `shape` with like's dtype (size-only if like is) from src."""
        out = self._empty(shape, like)
        self.flush()
        return Handle(self, self.dist.irecv(self._t(out), src=int(src), tag=tag), out)

    def recv(self, shape, like, src: int, tag: int = 0):
        return self.irecv(shape, like, src, tag).wait()


class _Tagged(contextlib.AbstractContextManager):
    def __init__(self, comm: RankComm, tags: dict):
        self.comm, self.tags, self.inner = comm, tags, None

    def __enter__(self):
        self.comm.flush()
        self.inner = clock.tagged(**self.tags)
        self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.comm.flush()
        return self.inner.__exit__(*exc)


def pack(xs):
    """Several arrays as one flat buffer (one message instead of several)."""
    return concat([x.reshape(-1) for x in xs])


def unpack(buf, likes):
    """The arrays `pack` packed, shaped like `likes`."""
    out, at = [], 0
    for like in likes:
        n = like.size
        out.append(as_meta(like) if is_meta(buf) else buf[at:at + n].reshape(like.shape))
        at += n
    return out


class Ready:
    """A result that needs no communication (a group of one), with a Handle's wait()."""

    def __init__(self, result):
        self.result = result

    def wait(self):
        return self.result
