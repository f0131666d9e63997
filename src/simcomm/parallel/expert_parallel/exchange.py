"""Megatron-Core's all-to-all token dispatcher (MoEAlltoAllTokenDispatcher) on a RankComm: where the routed rows of
one rank meet the experts that compute them, and back.

Dispatch, one MoE layer, one micro-batch, on every rank of an EP group (rows already permuted expert-major, so the
rows for each EP rank's experts are contiguous):
1. the per-expert counts are all-gathered over EP (and then over ETP), so every rank knows every split;
2. all-to-all over EP: rank j gets the rows for its E / EP experts (variable splits, from the real routing), and
   their probabilities in a second, small all-to-all;
3. with ETP > 1, an all-gather over ETP: each expert is cut over ETP ranks (FC1 by columns, FC2 by rows), so every
   ETP rank computes every row the ETP group received (uneven sizes: padded to the largest, then trimmed);
4. the rows, arrived as [ETP member][source][local expert] chunks, sorted by local expert (sort_chunks_by_idxs).
Combine runs it backwards: unsort, reduce-scatter over ETP (each ETP rank's FC2 shard gave a partial sum), and the
all-to-all back with the splits swapped. The backward of combine moves gradients the way dispatch moves rows, and
the backward of dispatch the way combine does (the probabilities' gradients come back with the rows').
Everything is tagged axis=ep or axis=etp.
"""
from __future__ import annotations

import numpy as np

from ..model.moe.dispatch import chunk_orders, sort_chunks_by_index, splits_by_rank
from ..model.tensor import Meta, concat, is_meta


class ExpertParallel:
    """One rank's view of its EP group (ep_size ranks of num_experts / ep_size experts each) and ETP group."""

    def __init__(self, comm, num_experts: int, ep_group, ep_size: int, ep_rank: int, etp_group=None,
                 etp_size: int = 1, etp_rank: int = 0, charge=None):
        self.comm, self.E = comm, num_experts
        self.ep_group, self.ep, self.ep_rank = ep_group, ep_size, ep_rank
        self.etp_group, self.etp, self.etp_rank = etp_group, etp_size, etp_rank
        self.local = num_experts // ep_size
        self.mine = slice(ep_rank * self.local, (ep_rank + 1) * self.local)
        self.sort, self.restore = chunk_orders(self.local, ep_size * etp_size)
        self.sorts = self.local > 1 and ep_size * etp_size > 1
        self.charge = charge or (lambda name, counts=None: None)

    def _charge(self, name: str) -> None:
        if self.sorts:
            self.charge(name)

    # ---- the exchanges -----------------------------------------------------------------------------------
    def _counts(self, tokens_per_expert) -> np.ndarray:
        """[etp, ep, E]: rows each (ETP member, EP member) sends each expert."""
        counts = np.asarray(tokens_per_expert, np.int64)[None, :]
        if self.ep > 1:
            with self.comm.tagged(axis="ep"):
                counts = self.comm.all_gather(counts, self.ep_group, self.ep)
        if self.etp > 1:
            with self.comm.tagged(axis="etp"):
                counts = self.comm.all_gather(counts, self.etp_group, self.etp)
        return np.asarray(counts).reshape(self.etp, self.ep, self.E)

    def _all_to_all(self, x, send, recv):
        if self.ep == 1:
            return x
        with self.comm.tagged(axis="ep"):
            return self.comm.all_to_all(x, self.ep_group, send, recv)

    def _gather(self, x, sizes):
        """Every ETP member's rows (sizes[t] each), back to back in member order."""
        if self.etp == 1:
            return x
        m = int(max(sizes))
        with self.comm.tagged(axis="etp"):
            got = self.comm.all_gather(_pad(x, m), self.etp_group, self.etp)
        return concat([got[t * m:t * m + int(n)] for t, n in enumerate(sizes)], axis=0)

    def _reduce_scatter(self, x, sizes):
        """The sum over ETP members of x (every member's rows back to back, sizes[t] each), this member's rows."""
        if self.etp == 1:
            return x
        m, at, parts = int(max(sizes)), 0, []
        for n in sizes:
            parts.append(_pad(x[at:at + int(n)], m))
            at += int(n)
        with self.comm.tagged(axis="etp"):
            out = self.comm.reduce_scatter(concat(parts, axis=0), self.etp_group, self.etp)
        return out[:int(sizes[self.etp_rank])]

    # ---- dispatch and combine ----------------------------------------------------------------------------
    def dispatch(self, rows, probs, tokens_per_expert):
        counts = self._counts(tokens_per_expert)[:, :, self.mine]  # [etp, ep sources, local experts]
        send = splits_by_rank(tokens_per_expert, self.ep)
        recv = counts[self.etp_rank].sum(axis=1)
        member = counts.sum(axis=(1, 2))  # rows each ETP member received
        chunks = counts.reshape(-1)  # [etp][source][local expert]
        rows = self._arrive(self._all_to_all(rows, send, recv), member, chunks)
        probs = self._arrive(self._all_to_all(probs, send, recv), member, chunks)
        self._charge("moe.sort")
        return rows, probs, counts.sum(axis=(0, 1)), (send, recv, member, chunks)

    def _arrive(self, x, member, chunks):
        x = self._gather(x, member)
        return sort_chunks_by_index(x, chunks, self.sort) if self.sorts else x

    def _leave(self, x, member, chunks):
        if self.sorts:
            x = sort_chunks_by_index(x, chunks[self.sort], self.restore)
        return self._reduce_scatter(x, member)

    def combine(self, out, ctx):
        send, recv, member, chunks = ctx
        self._charge("moe.unsort")
        return self._all_to_all(self._leave(out, member, chunks), recv, send)

    def combine_backward(self, drows, ctx):
        send, recv, member, chunks = ctx
        out = self._arrive(self._all_to_all(drows, send, recv), member, chunks)
        self._charge("moe.unsort.backward")
        return out

    def dispatch_backward(self, drows, dprobs, ctx):
        send, recv, member, chunks = ctx
        self._charge("moe.sort.backward")
        return (self._all_to_all(self._leave(drows, member, chunks), recv, send),
                self._all_to_all(self._leave(dprobs, member, chunks), recv, send))


def _pad(x, rows: int):
    """x with zero rows appended up to `rows`."""
    if is_meta(x):
        return Meta((rows,) + tuple(x.shape[1:]), x.dtype)
    if x.shape[0] == rows:
        return x
    return np.concatenate([x, np.zeros((rows - x.shape[0],) + x.shape[1:], x.dtype)], axis=0)
