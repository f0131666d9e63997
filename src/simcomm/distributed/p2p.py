"""Point-to-point matching: a send and a recv meet, then one flow carries the bytes.

Rendezvous protocol (as NCCL does): the flow starts once both sides are posted, so two ranks that both send first
deadlock, as they would on real GPUs. Matching is FIFO per (source, destination, tag); a recv with no source takes
the earliest posted send to it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import MismatchError
from .tensors import as_array, describe, dtype_of, nbytes_of, shape_of


@dataclass(eq=False)
class _Post:
    rank: int
    peer: int | None  # None: any source (recv only)
    tag: int
    tensor: object
    event: object  # fires at delivery; its value is the sender's global rank
    seq: int
    posted: float


class P2PMatcher:
    """Posted sends and recvs of one run, matched in posting order."""

    def __init__(self, session, fail):
        self.session = session
        self.sim = session.sim
        self.fail = fail  # aborts the run with an error
        self._sends: dict[tuple[int, int, int], deque[_Post]] = {}
        self._recvs: dict[tuple[int, int, int], deque[_Post]] = {}
        self._any_recvs: dict[tuple[int, int], deque[_Post]] = {}
        self._seq = 0

    def post_send(self, src: int, dst: int, tag: int, tensor):
        post = self._post(src, dst, tag, tensor)
        specific = self._recvs.get((src, dst, tag))
        anyq = self._any_recvs.get((dst, tag))
        candidates = [q for q in (specific, anyq) if q]
        if candidates:
            q = min(candidates, key=lambda q: q[0].seq)
            self._start(post, q.popleft())
        else:
            self._sends.setdefault((src, dst, tag), deque()).append(post)
        return post.event

    def post_recv(self, dst: int, src: int | None, tag: int, tensor):
        post = self._post(dst, src, tag, tensor)
        if src is None:
            queues = [q for (s, d, t), q in self._sends.items() if d == dst and t == tag and q]
            if queues:
                self._start(min(queues, key=lambda q: q[0].seq).popleft(), post)
            else:
                self._any_recvs.setdefault((dst, tag), deque()).append(post)
        else:
            q = self._sends.get((src, dst, tag))
            if q:
                self._start(q.popleft(), post)
            else:
                self._recvs.setdefault((src, dst, tag), deque()).append(post)
        return post.event

    def _post(self, rank, peer, tag, tensor) -> _Post:
        self._seq += 1
        return _Post(rank, peer, tag, tensor, self.sim.env.event(), self._seq, self.sim.now)

    def _start(self, send: _Post, recv: _Post) -> None:
        src, dst = send.rank, recv.rank
        if dtype_of(send.tensor) != dtype_of(recv.tensor) or nbytes_of(send.tensor) != nbytes_of(recv.tensor):
            self.fail(MismatchError(
                f"send/recv mismatch: rank {src} sends {describe(send.tensor)} to rank {dst} (tag {send.tag}), "
                f"but rank {dst} receives into {describe(recv.tensor)}"))
        data = as_array(send.tensor)
        snapshot = None if data is None else np.array(data, copy=True)
        sent = self.session.send(src, dst, nbytes_of(send.tensor), label=f"send {src}->{dst}",
                                 tags={"tag": send.tag} if send.tag else None)
        self.sim.recorder.op(dst, "recv_posted", recv.posted, recv.posted, 0, f"recv from {src}", src)

        def deliver(_event):
            out = as_array(recv.tensor)
            if snapshot is not None and out is not None:
                out[...] = snapshot.reshape(shape_of(recv.tensor)) if out.shape != snapshot.shape else snapshot
            send.event.succeed(src)
            recv.event.succeed(src)

        sent.callbacks.append(deliver)
