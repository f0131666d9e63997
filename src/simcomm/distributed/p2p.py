"""Point-to-point matching: a send and a recv meet, then one flow carries the bytes.

Rendezvous protocol (as NCCL does): the flow starts once both sides are posted, so two ranks that both send first
deadlock, as they would on real GPUs. Matching is FIFO per (source, destination, tag); a recv with no source takes
the earliest posted send to it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import MismatchError
from .tensors import Arg, write


class UnmatchedP2PWarning(UserWarning):
    """A run ended with isend/irecv calls that never found a partner and that nobody waited for."""


@dataclass(eq=False)
class _Post:
    rank: int
    peer: int | None  # None: any source (recv only)
    tag: int
    tensor: Arg
    event: object  # fires at delivery; its value is the sender's global rank
    seq: int
    posted: float
    tags: Mapping = field(default_factory=dict)  # the posting rank's tags (clock.tagged) when it posted
    after: list = field(default_factory=list)  # compute the poster had queued: a send starts after it


class P2PMatcher:
    """Posted sends and recvs of one run, matched in posting order."""

    def __init__(self, session):
        self.session = session
        self.sim = session.sim
        self._sends: dict[tuple[int, int, int], deque[_Post]] = {}
        self._recvs: dict[tuple[int, int, int], deque[_Post]] = {}
        self._any_recvs: dict[tuple[int, int], deque[_Post]] = {}
        self._seq = 0

    def post_send(self, src: int, dst: int, tag: int, tensor: Arg, tags: Mapping | None = None, after=()):
        post = self._post(src, dst, tag, tensor, tags)
        post.after = list(after)
        specific = self._recvs.get((src, dst, tag))
        anyq = self._any_recvs.get((dst, tag))
        candidates = [q for q in (specific, anyq) if q]
        if candidates:
            q = min(candidates, key=lambda q: q[0].seq)
            self._start(post, q.popleft())
        else:
            self._sends.setdefault((src, dst, tag), deque()).append(post)
        return post.event

    def post_recv(self, dst: int, src: int | None, tag: int, tensor: Arg, tags: Mapping | None = None):
        post = self._post(dst, src, tag, tensor, tags)
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

    def _post(self, rank, peer, tag, tensor, tags=None) -> _Post:
        self._seq += 1
        return _Post(rank, peer, tag, tensor, self.sim.env.event(), self._seq, self.sim.now, dict(tags or {}))

    def unmatched(self) -> list[str]:
        """Posted sends and receives that found no partner, as text."""
        posts = [(p, f"send(dst={p.peer}") for q in self._sends.values() for p in q]
        posts += [(p, f"recv(src={'any' if p.peer is None else p.peer}") for qs in (self._recvs, self._any_recvs)
                  for q in qs.values() for p in q]
        return [f"rank {p.rank}: {call}{f', tag={p.tag}' if p.tag else ''}, {p.tensor.describe()})"
                for p, call in sorted(posts, key=lambda pc: pc[0].seq)]

    def _start(self, send: _Post, recv: _Post) -> None:
        src, dst = send.rank, recv.rank
        s, r = send.tensor, recv.tensor
        if s.dtype != r.dtype or s.nbytes != r.nbytes or (s.data is None) != (r.data is None):
            error = MismatchError(
                f"rank {src} -> rank {dst}: send/recv mismatch: rank {src} sends {s.describe()} to rank {dst} "
                f"(tag {send.tag}), but rank {dst} receives into {r.describe()}")
            for post in (send, recv):  # both ends raise it
                post.event.fail(error)
                post.event.defused = True
            return
        snapshot = None if s.data is None else s.flat().copy()
        sent = self.session.send(src, dst, s.nbytes, label=f"send {src}->{dst}", after=send.after,
                                 tags={**send.tags, "tag": send.tag} if send.tag else send.tags)
        self.sim.recorder.op(dst, "recv_posted", recv.posted, recv.posted, 0, f"recv from {src}", src, recv.tags)

        def deliver(_event):
            if snapshot is not None:
                write(r, snapshot)
            send.event.succeed(src)
            recv.event.succeed(src)

        sent.callbacks.append(deliver)
