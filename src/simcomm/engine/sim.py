"""A Simulation ties together the clock (simpy), the network, the per-device queues and the recorder."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from heapq import heappush

import simpy

from ..errors import SimcommError

from .compute import ComputeQueue
from .network import FlowNetwork
from .resources import DeviceQueue
from .trace import Recorder


_INF = float("inf")
_YOUNG = 10_000  # new objects between two of Python's collections while a simulation runs (see fewer_collections)


class CountingEnvironment(simpy.Environment):
    """A simpy Environment that counts the events it schedules (the simulator's own cost measure)."""

    def __init__(self):
        super().__init__()
        self.scheduled = 0

    def schedule(self, event, priority=1, delay=0):
        if not self._now + delay < _INF:  # nan or inf (also a finite delay that overflows the clock): such an
            # event could never be ordered in time (nan breaks the heap; at inf the run would end as a deadlock)
            raise SimcommError(f"the simulation was asked to schedule an event at t={self._now!r} + {delay!r} s = "
                               f"{self._now + delay!r} s: a figure or an amount that is not finite (or too large) "
                               "reached the engine")
        self.scheduled += 1
        heappush(self._queue, (self._now + delay, priority, next(self._eid), event))  # simpy's, without its call

    def run(self, until=None):
        with fewer_collections():
            return super().run(until)


@contextmanager
def fewer_collections(young: int = _YOUNG):
    """Python's cyclic garbage collector started once `young` more objects have been made than freed, not 700
    (CPython's default), for as long as the block runs: an event-driven run makes and drops cyclic objects by the
    hundred thousand (events, their callbacks, processes' generators), and each collection also promotes what is
    still in flight, which later collections of the older generations scan again with everything a plan has built
    (a deep pipeline's step spent up to a third of its time collecting). Results are unaffected: the same garbage,
    collected in larger batches (at most `young` objects more wait for it)."""
    old = gc.get_threshold()
    if old[0] and old[0] < young:  # 0: the collector is off; leave it so
        gc.set_threshold(young, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def when_all(env: simpy.Environment, events: list, then) -> None:
    """Call then() once every one of `events` (none processed yet) has fired, as a process that yields
    env.all_of(events) and then calls it would, at the same point of the event order, without the process (its
    start event and generator: a pipeline send waiting for its receive is one of thousands per step). A failed
    event is raised by simpy, as the process would have failed."""
    if len(events) != 1:
        env.all_of(events).callbacks.append(lambda e: then() if e.ok else None)
        return
    # one event (a send's receive being posted): a plain event in the all_of's place in the event order
    after = env.event()
    after.callbacks.append(lambda e: then() if e.ok else None)

    def fired(e):
        if e.ok:
            after.succeed()
        else:  # as all_of does: the failure moves on to the event that waits for it
            e.defused = True
            after.fail(e.value)
    events[0].callbacks.append(fired)


class Simulation:
    """One simulated run on one cluster.

    `closed_form` lets the collective executor time runs of identical steps in closed form ("steps" detail
    only); turning it off forces the step-by-step path, which gives the same times (tests compare the two).
    `symmetric` (with closed_form) lets a collective that has the simulation to itself be timed on one of each
    alike part of the cluster (algorithms/symmetric.py): the same times up to float rounding.
    `interference`: compute and communication share each GPU's SMs (engine/sharing.py); None takes the
    cluster's `tuning.interference`.
    """

    def __init__(self, cluster, detail: str = "flows", closed_form: bool = True, symmetric: bool = True,
                 interference: bool | None = None):
        self.cluster = cluster
        self.closed_form = closed_form
        self.symmetric = symmetric
        self.env = CountingEnvironment()
        self.recorder = Recorder(cluster, detail)
        self.network = FlowNetwork(self.env, cluster, self.recorder)
        dev = cluster.device
        self.memory = DeviceQueue("hbm", cluster.num_ranks, dev.memory_bandwidth, self.recorder)
        if interference is None:
            interference = cluster.template.tuning.interference
        self.interference = bool(interference) and dev.sms > 0
        self.compute = ComputeQueue(self.env, cluster.num_ranks, dev.compute_rate, self.recorder, sms=dev.sms,
                                    hbm=dev.memory_bandwidth, sharing=self.interference)
        self.memo: dict = {}  # results that depend only on the cluster, kept for this run (e.g. tuner choices)

    @property
    def now(self) -> float:
        return self.env.now

    def at(self, when: float) -> simpy.Event:
        """An event that fires at absolute time `when` (now if that has passed)."""
        return self.env.timeout(max(when - self.env.now, 0.0))

    def stats(self) -> dict:
        return {"events": self.env.scheduled, **self.network.stats, **self.compute.stats,
                "recorded_flows": self.recorder.flow_count}
