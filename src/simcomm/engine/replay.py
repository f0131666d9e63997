"""Closed forms for the flow network: a batch alone on its links replays a trajectory it recorded earlier.

Max-min fair sharing decomposes over links: flows that share no link with a batch cannot change its rates. So a
batch whose links no other active flow crosses progresses exactly as it did the last time it ran alone, and its
recorded trajectory (when each flow sent its last byte, and the rates in between) can be replayed with one event
instead of being solved. A *run* replays the same trajectory for k identical steps started back to back (the
collective executor's repeated steps), still with one event. Anything that later wants one of the replay's links
turns the step in flight back into live flows (`FlowNetwork` does that), so contention is always solved.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

import numpy as np
import simpy


@dataclass(eq=False)
class Trajectory:
    """How a batch alone on its links progressed: when each flow sent its last byte (offsets from the start),
    and the rates of every flow in each segment between re-solves."""

    offsets: np.ndarray
    seg_starts: np.ndarray
    seg_rates: np.ndarray  # (segments, flows)
    seg_loads: np.ndarray | None = None  # (segments, links): link loads, computed when first needed

    @property
    def duration(self) -> float:
        return float(self.offsets.max())

    def sent(self, elapsed: float) -> np.ndarray:
        """Bytes each flow has put on the wire `elapsed` seconds after the start."""
        ends = np.append(self.seg_starts[1:], np.inf)
        spans = np.clip(np.minimum(ends, elapsed) - self.seg_starts, 0, None)
        return spans @ self.seg_rates

    def rates_at(self, elapsed: float) -> np.ndarray:
        k = int(np.searchsorted(self.seg_starts, elapsed, side="right")) - 1
        return self.seg_rates[max(k, 0)]


@dataclass(eq=False)
class Learning:
    """A live batch alone on its links whose trajectory is being recorded, to be replayed next time."""

    transfer: object
    key: bytes
    start: float
    links: np.ndarray
    seg_starts: list = field(default_factory=list)
    seg_rates: list = field(default_factory=list)
    bw_done: np.ndarray = None


class StepTemplate(NamedTuple):
    """What builds the Transfer of one step of a Run (the step's flows, as `FlowNetwork.run` was given them)."""

    src: np.ndarray
    dst: np.ndarray
    payload: np.ndarray  # bytes per flow
    route: np.ndarray  # route id per flow
    label: str
    extra: np.ndarray  # extra latency per flow
    pattern: bytes  # the flows' key in the network's caches
    weight: np.ndarray  # flows each entry stands for
    tags: Mapping


@dataclass(eq=False)
class Run:
    """k identical transfers replayed back to back (one event for all of them), as `FlowNetwork.run` starts them.

    `done` fires when the last step has sent its last byte, or earlier when the run is cut (something wanted its
    links or its ranks' memory): then `completed` steps are over and `inflight` is the step under way (a
    Transfer, live or replayed on its own) or None if the cut fell between steps.
    """

    starts: np.ndarray  # start time of each step
    done: simpy.Event
    offsets: np.ndarray  # per-flow offsets of the last byte from a step's start
    latency: np.ndarray  # per-flow route plus extra latency
    template: StepTemplate
    wire: np.ndarray
    completed: int = 0
    inflight: object = None
    cut: bool = False

    @property
    def steps(self) -> int:
        return len(self.starts)


@dataclass(eq=False)
class Replay:
    """A batch (or a run of identical batches) replaying a trajectory on links nothing else uses."""

    rid: int
    transfer: object  # the Transfer of a single replay; None for a run
    start: float
    trajectory: Trajectory
    wire: np.ndarray
    links: np.ndarray
    run: Run | None = None
    token: int = 0  # bumped whenever the pending timer no longer applies
