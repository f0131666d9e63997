"""A torch ProcessGroup served by simcomm: each group a launched rank is handed (c10d.py registers them).

Much of torch does not call torch.distributed's Python functions but the process group object's own methods:
DDP's C++ Reducer (and the C++ helpers that check parameter shapes and broadcast the initial state), the
functional collectives DTensor issues (all_gather_into_tensor, reduce_scatter_tensor, all_reduce, all_to_all_single
on a group found by name), and c10d's own Python functions that torch's modules import directly (scatter in
DTensor's mesh_scatter, the pipelining stages' sends and receives). torch lets a Python subclass of ProcessGroup
stand in for the C++ one, so every such method here runs simcomm's collective on the rank's group, with the root
and peer ranks of torch's options as group ranks. Every rank issues them in the same order, so they meet as they
would on a real cluster. An all-reduce issued during a backward pass (a DDP gradient bucket) starts and returns at
once, overlapping the rest of the backward pass in simulated time as DDP does; the others complete before the
method returns (sends and receives when waited for).
"""
from __future__ import annotations

import torch
import torch.distributed as tdist
from torch.futures import Future

from ... import distributed as sdist
from .calls import at_backward_end, blocking, in_backward, sim_op
from .context import RankContext


class SimWork(tdist._Work):
    """A collective's work: finished when made, or, given `finish`, finished by calling it (which may set
    `future` itself; otherwise the future gets the tensors)."""

    def __init__(self, tensors, future: Future | None = None, finish=None):
        super().__init__()
        self._future = future if future is not None else Future()
        self._tensors, self._finish = tensors, finish
        if finish is None:
            self._future.set_result(tensors)

    def wait(self, timeout=None) -> bool:
        if not self._future.done():
            self._finish()
        if not self._future.done():
            self._future.set_result(self._tensors)
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        return self._future.done()

    def get_future(self) -> Future:
        return self._future


class SimProcessGroup(tdist.ProcessGroup):
    """One rank's view of a simcomm group as a torch ProcessGroup (the methods DDP's C++ side calls)."""

    def __init__(self, ctx: RankContext, group):
        super().__init__(sdist.get_rank(group), sdist.get_world_size(group))
        self.simcomm_group, self._ctx = group, ctx
        self._name, self._desc = "", ""
        self._in_flight: list[tuple] = []  # (simcomm Works, torch Future, tensors) issued during a backward pass

    # torch's C++ side keeps a group's name and description on its backends, which this group has none of
    def getGroupName(self) -> str:  # noqa: N802 - torch's name
        return self._name

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._name = name

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._desc

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._desc = desc

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        # only torch's C++ side asks (DDP's logger looks a known name up among the group's C++ backends, which
        # this group has none of); dist.get_backend(group) still answers the backend the script asked for
        return "simcomm"

    def _run(self, fn, *args, **kwargs):
        kwargs = {k: sim_op(v) if k == "op" else v for k, v in kwargs.items()}
        with blocking(self._ctx):
            return fn(*args, group=self.simcomm_group, **kwargs)

    def _overlapped(self, tensors, op) -> SimWork:
        """During a backward pass (DDP's bucket all-reduces): start the all-reduces and return at once, so that the
        rest of the backward pass runs meanwhile in simulated time, as DDP overlaps them. They are waited for in an
        autograd callback queued now, which runs when the backward pass ends, before the DDP finalizer (queued after
        the last bucket is launched) reads the results."""
        future = Future()
        if not self._in_flight:
            at_backward_end(self._finish_in_flight)
        works = [self._run(sdist.all_reduce, t, op=op, async_op=True) for t in tensors]
        self._in_flight.append((works, future, tensors))
        return SimWork(tensors, future, self._finish_in_flight)

    def _finish_in_flight(self) -> None:
        in_flight, self._in_flight = self._in_flight, []
        with blocking(self._ctx):  # the backward compute since the last launch is charged first
            for works, future, tensors in in_flight:
                for work in works:
                    work.wait()
                future.set_result(tensors)

    # C++ callers pass (list of tensors, options); Python callers may use torch's other overloads, (tensor, op)
    # for allreduce and (tensor, root) for broadcast, as DDP's find_unused_parameters path does
    def allreduce(self, tensors, opts=None):
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        op = opts.reduceOp if isinstance(opts, tdist.AllreduceOptions) else opts
        op = tdist.ReduceOp.SUM if op is None else op
        if in_backward():
            return self._overlapped(tensors, op)
        for t in tensors:
            self._run(sdist.all_reduce, t, op=op)
        return SimWork(tensors)

    def broadcast(self, tensors, opts=None):
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else tensors
        root = opts.rootRank if isinstance(opts, tdist.BroadcastOptions) else (opts or 0)
        for t in tensors:
            self._run(sdist.broadcast, t, src=sdist.get_global_rank(self.simcomm_group, root))
        return SimWork(tensors)

    def allgather(self, output_lists, inputs, opts=None):
        for outs, t in zip(output_lists, inputs):
            self._run(sdist.all_gather, outs, t)
        return SimWork(output_lists)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        self._run(sdist.all_gather_into_tensor, output, input)
        return SimWork([output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for output, input in zip(outputs, inputs):  # noqa: A001 - torch's name
            self._run(sdist.all_gather_into_tensor, output, input)
        return SimWork(outputs)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        self._run(sdist.reduce_scatter_tensor, output, input, op=_op(opts))
        return SimWork([output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for output, input in zip(outputs, inputs):  # noqa: A001 - torch's name
            self._run(sdist.reduce_scatter_tensor, output, input, op=_op(opts))
        return SimWork(outputs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        for output, inputs in zip(outputs, input_lists):
            self._run(sdist.reduce_scatter, output, inputs, op=_op(opts))
        return SimWork(outputs)

    def allreduce_coalesced(self, tensors, opts=None):
        for t in tensors:
            self._run(sdist.all_reduce, t, op=_op(opts))
        return SimWork(tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # noqa: A002
        self._run(sdist.all_to_all_single, output, input, output_split_sizes or None, input_split_sizes or None)
        return SimWork([output])

    def alltoall(self, outputs, inputs, opts=None):
        self._run(sdist.all_to_all, outputs, inputs)
        return SimWork(outputs)

    def reduce(self, tensors, opts=None):
        for t in tensors:
            self._run(sdist.reduce, t, op=_op(opts), group_dst=opts.rootRank)
        return SimWork(tensors)

    def gather(self, output_lists, inputs, opts=None):
        root = opts.rootRank
        for i, t in enumerate(inputs):
            self._run(sdist.gather, t, output_lists[i] if self.rank() == root else None, group_dst=root)
        return SimWork(output_lists)

    def scatter(self, outputs, input_lists, opts=None):
        root = opts.rootRank
        for i, t in enumerate(outputs):
            self._run(sdist.scatter, t, input_lists[i] if self.rank() == root else None, group_src=root)
        return SimWork(outputs)

    def send(self, tensors, dst, tag=0):
        works = [self._run(sdist.isend, t, group_dst=dst, tag=tag) for t in tensors]
        return SimWork(tensors, finish=lambda: self._wait(works))

    def recv(self, tensors, src, tag=0):
        works = [self._run(sdist.irecv, t, group_src=src, tag=tag) for t in tensors]
        return SimWork(tensors, finish=lambda: self._wait(works))

    def _wait(self, works) -> None:
        with blocking(self._ctx):
            for work in works:
                work.wait()

    def barrier(self, opts=None):
        self._run(sdist.barrier)
        return SimWork([])


def _op(opts):
    """The reduce op of a C++ caller's options (SUM when it gives none)."""
    op = getattr(opts, "reduceOp", None)
    return tdist.ReduceOp.SUM if op is None else op


__all__ = ["SimProcessGroup", "SimWork"]
