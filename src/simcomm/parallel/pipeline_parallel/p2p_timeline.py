"""A pipeline schedule's timeline with the step's point-to-point rules (timing.py): each rank walks its actions as
StageTiming does, with passes and sends of given lengths, and no contention. A lower bound of when each pass of the
step runs, and of the step's pipeline part, when the lengths are (each pass at least its templates' time alone,
each send at least the quickest stage-to-stage send alone): every time below is a max and sum of such lengths and
of earlier times, as in the step, where each only grows.

Besides timeline.py's data dependencies it counts what the step's p2p adds:
- a blocking send (Megatron's p2p, unless overlap_p2p_comm) holds its sender until its transfer is through;
- the rendezvous (p2p_rendezvous): a transfer starts only once its receive is posted, where the receiver posts it
  (timing.rank_plan's posts; every receive at the start for the schedules not Megatron's);
- the interleaved schedule's steady forwards send their activations with the backward that follows them;
- the last stage's loss all-reduce after each of its forwards (`loss`).
Schedules with overlapped pairs (DualPipe) are not walked here (the step times their pairs otherwise): None.
"""
from __future__ import annotations

from typing import Callable

from ...errors import SimcommError
from .actions import FORWARD, has_pairs
from .timing import rank_plan


def p2p_timeline(layout, duration: Callable, comm: float, loss: Callable[[int], float] | None = None) \
        -> list[list[tuple[float, float]]] | None:
    """Per rank, (start, end) of each of its actions in order (module docstring): duration(rank, action) of a pass,
    `comm` seconds a send takes, loss(rank) seconds of the loss all-reduce after a forward that ends the model
    (None: none). None for a schedule with overlapped pairs."""
    if has_pairs(layout.schedule):
        return None
    walk = _Walk(layout, duration, comm, loss)
    ranks = [walk.rank(r) for r in range(layout.dims.pp)]
    live = list(range(len(ranks)))
    while live:
        before = (walk.progress(), len(live))
        for r in list(live):
            if next(ranks[r], True) is True:  # the rank's walk is over
                live.remove(r)
        if live and (walk.progress(), len(live)) == before:
            raise SimcommError(f"the pipeline schedule deadlocks: ranks {live} wait for each other")
    return walk.out


class _Walk:
    """The ranks' shared state: when each receive was posted and each input arrived ((phase, micro-batch, rank,
    chunk) keys, as timing.py's), and the timed actions."""

    def __init__(self, layout, duration, comm, loss):
        self.layout, self.duration, self.comm, self.loss = layout, duration, comm, loss
        cfg = layout.config
        self.rendezvous, self.overlap = cfg.p2p_rendezvous, cfg.overlap_p2p_comm
        self.posted: dict = {}
        self.arrived: dict = {}
        self.out: list[list[tuple[float, float]]] = [[] for _ in layout.schedule]

    def progress(self) -> int:
        return len(self.posted) + len(self.arrived) + sum(map(len, self.out))

    def rank(self, r: int):
        """Rank r's walk: a generator that yields (False) while it waits for another rank."""
        plan = rank_plan(self.layout, r)
        actions, receives, outputs, posts = plan.actions, plan.receives, plan.outputs, plan.posts
        defers = self.rendezvous and plan.interleaved and plan.steady and not self.overlap
        posted, arrived, out, comm, rendezvous = self.posted, self.arrived, self.out[r], self.comm, self.rendezvous
        ends = any(a.phase == FORWARD and to is None for a, to in zip(actions, outputs))  # a forward ends the model
        loss = self.loss(r) if ends and self.loss is not None else 0.0  # the loss all-reduce after each such forward
        if not plan.megatron:  # every receive posted at the start
            for k in receives:
                if k is not None:
                    posted.setdefault(k, 0.0)
        now, deferred = 0.0, []
        for i, a in enumerate(actions):
            key = receives[i]
            if key is not None:
                posted.setdefault(key, now)
                while key not in arrived:
                    yield False
                now = max(now, arrived[key])
            when, ahead = posts[i]
            if when == "start":
                for k in ahead:
                    posted.setdefault(k, now)
            start, now = now, now + self.duration(r, a)
            out.append((start, now))
            forward, to = a.phase == FORWARD, outputs[i]
            if forward and to is None:
                now += loss
            if when == "end":
                for k in ahead:
                    posted.setdefault(k, now)
            sends, deferred = deferred, []
            if to is not None and to[0] == r:  # the V's turn: on this GPU
                arrived[plan.arrivals[i]] = now
            elif to is not None:
                sends.append(plan.arrivals[i])
            if defers and forward and i + 1 < len(actions) and actions[i + 1].phase != FORWARD:
                deferred, sends = sends, []  # a steady iteration's exchange follows its backward (timing.py)
            through = now
            for k in sends:
                while rendezvous and k not in posted:
                    yield False
                arrived[k] = max(now, posted[k] if rendezvous else now) + comm
                through = max(through, arrived[k])
            if not self.overlap:
                now = through


__all__ = ["p2p_timeline"]
