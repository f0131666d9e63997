"""Megatron-LM's tensor-parallel communication regions (megatron/core/tensor_parallel/mappings.py), on a RankComm.

Without sequence parallelism the activations between blocks are whole on every TP rank:
  column-parallel input  forward identity          backward all-reduce          ("f" in the Megatron paper)
  row-parallel output    forward all-reduce        backward identity            ("g")
With sequence parallelism they are split along the sequence (axis 0) over the TP ranks:
  column-parallel input  forward all-gather        backward reduce-scatter; the input is kept split and
                                                   all-gathered again for the weight gradient, as Megatron does
  row-parallel output    forward reduce-scatter    backward all-gather
The embedding's output is all-reduced over the vocabulary shards (then split along the sequence under SP: no
communication forward, an all-gather backward), and the cross-entropy all-reduces per-token max and sums.
"""
from __future__ import annotations

from ..model.tensor import split


class TensorParallel:
    """One rank's view of its TP group (size > 1), with sequence parallelism or not."""

    def __init__(self, comm, group, size: int, rank: int, sequence_parallel: bool = False):
        self.comm, self.group, self.size, self.rank = comm, group, size, rank
        self.sequence_parallel = sequence_parallel

    def _tagged(self):
        return self.comm.tagged(axis="tp")

    def _all_reduce(self, x, op="sum"):
        with self._tagged():
            return self.comm.all_reduce(x, self.group, op)

    def _all_gather(self, x):
        with self._tagged():
            return self.comm.all_gather(x, self.group, self.size)

    def _reduce_scatter(self, x):
        with self._tagged():
            return self.comm.reduce_scatter(x, self.group, self.size)

    # ---- linear regions ----------------------------------------------------------------------------------
    def column_in(self, x):
        """(the column-parallel linear's input, what backward keeps of it)."""
        return (self._all_gather(x), x) if self.sequence_parallel else (x, x)

    def column_in_recover(self, kept):
        return self._all_gather(kept) if self.sequence_parallel else kept

    def column_in_backward(self, dx):
        return self._reduce_scatter(dx) if self.sequence_parallel else self._all_reduce(dx)

    def row_out(self, y):
        return self._reduce_scatter(y) if self.sequence_parallel else self._all_reduce(y)

    def row_out_backward(self, dy):
        return self._all_gather(dy) if self.sequence_parallel else dy

    # ---- vocabulary and sequence -------------------------------------------------------------------------
    def vocab_reduce(self, x, op: str = "sum"):
        return self._all_reduce(x, op)

    def scatter_sequence(self, x):
        return split(x, self.size, axis=0)[self.rank] if self.sequence_parallel else x

    def scatter_sequence_backward(self, dx):
        return self._all_gather(dx) if self.sequence_parallel else dx
