"""The data-parallel stream of a layout's step without running it: the policy's collectives in a dry run of its
hooks (data_parallel/timing.py), and the least time the stream's last collective can end (a lower bound of the
step that the layout search uses: search.bound; the interference bound counts the same collectives:
interference_bound.py).

A stage's data-parallel collectives run one after another on its stream (the first representative's groups, on
which the first GPU of the stage is), each no sooner than the policy issues it (a bucket once its gradients are
ready, a gather once the compute reaches its unit) and each at least as long as alone on the cluster (contention
and compute beside it only slow it). Given lower bounds of when each pass starts (the schedule's timeline of the
passes alone), the stream ends no sooner than the list schedule of its collectives at their times alone, released
at those lower bounds; and the stage is ready for the optimizer only once what the policy's end waits for is done.
"""
from __future__ import annotations

import math
from collections import Counter
from types import SimpleNamespace

import numpy as np

from ..session import Session
from .data_parallel.timing import POLICIES
from .pipeline_parallel.actions import WEIGHT_GRADIENT, computations

SLACK = 1e-9  # the collectives' times alone are summed in another order, on another clock, than the step's


class _At(float):
    """The dry run's sim.at(t): the time a collective is issued after, no sooner."""


class DryRun:
    """Stands in for the step's Traffic and clock: the data-parallel policy's collectives, counted, not run. Its
    groups are the first representative's, on which the first GPU of each stage is (data_parallel/timing.py);
    those of one rank or no bytes are instant (Traffic) and not counted."""

    def __init__(self, pp: int):
        self.s = SimpleNamespace(sim=SimpleNamespace(now=0.0, at=_At))
        # per pipeline rank, in order: the collectives ((kind, group's key, bytes, dtype), one object per value:
        # the dry run of a long step issues hundreds of thousands) and the times they are released
        self.whats: list[list[tuple]] = [[] for _ in range(pp)]
        self.released: list[list[float]] = [[] for _ in range(pp)]
        self.groups: dict[bytes, np.ndarray] = {}  # a group's ranks by their bytes (its key in `whats`)
        self._keys: dict = {}  # id of a group the policy issues on (it keeps them throughout) -> its key or None
        self._whats: dict = {}  # each distinct collective, its one tuple

    @property
    def issued(self) -> list[dict]:
        """Per pipeline rank: {(kind, group, bytes, dtype): count}, in the order first issued."""
        return [Counter(mine) for mine in self.whats]

    def collective(self, kind: str, ranks, size: float, dtype: str, *, after=(), tags=None):
        key = self._keys.get(id(ranks), False)
        if key is False:
            key = self._key(ranks)
        n = int(size)
        if key is None or n <= 0:
            return None
        released = self.s.sim.now
        for t in after:
            if type(t) is _At and t > released:
                released = t
        what, stage = (kind, key, n, dtype), tags["stage"]
        whats = self.whats[stage]
        whats.append(self._whats.setdefault(what, what))
        self.released[stage].append(float(released))  # a plain float: the garbage collector need not track it
        return len(whats) - 1  # the collective's index on its stage's stream

    def _key(self, ranks) -> bytes | None:
        group = np.asarray(ranks, dtype=np.int64)
        key = self._keys[id(ranks)] = group.tobytes() if len(group) > 1 else None
        if key is not None:
            self.groups[key] = group
        return key


def dry_run(layout, passes: dict, ranks, starts: list[list[float]] | None = None,
            ends: list[float] | None = None) -> tuple[DryRun, dict[int, dict], dict[int, list]]:
    """The data-parallel policy's collectives before the optimizer (in the DryRun) on pipeline ranks `ranks` (the
    policy keeps each rank's state apart), its hooks called as the stages call them, each pass at
    `starts[rank][i]` (the i-th of the rank's computations; 0 when not given) and the stage's end at `ends[rank]`
    (lists or dicts by rank);
    per pipeline rank the passes its compute stream runs, {(id of the pass, whether the policy cut it inside a
    part): [the pass, how many times]}; and per pipeline rank what the policy's end waits for (the stream's
    collectives it counted, by index)."""
    run = DryRun(layout.dims.pp)
    clock = run.s.sim
    dp = POLICIES[layout.sharding.zero_stage](layout, run, passes, [0])
    dp.start()
    ran: dict[int, dict] = {}
    waited: dict[int, list] = {}
    after_part = dp.after_part if dp.acts_after_parts else None
    for r in ranks:
        actions = list(computations(layout.schedule[r]))
        last = {a.chunk: i for i, a in enumerate(actions) if a.phase in WEIGHT_GRADIENT}
        at = starts[r] if starts else [0.0] * len(actions)
        mine: dict = {}
        for i, a in enumerate(actions):
            p = passes[(r, a.chunk, a.phase)]
            clock.now = at[i]
            if a.phase in WEIGHT_GRADIENT:
                dp.on_backward(r, a, p, i == last[a.chunk])
            cut = dp.before_pass(r, a, p)
            for x in sorted(cut) if cut else ():
                if callable(cut[x]):
                    cut[x]()
            if after_part is not None:
                for part in p.parts:
                    after_part(r, a, part, clock.now + part.offset + part.template.duration if starts else 0.0)
            key = (id(p), bool(cut) and any(x != math.floor(x) for x in cut))
            got = mine.get(key)
            if got is None:
                mine[key] = [p, 1]
            else:
                got[1] += 1
        clock.now = ends[r] if ends else 0.0
        waited[r] = [op for op in dp.end(r) if op is not None]
        ran[r] = mine
    return run, ran, waited


def collective_alone(cluster, cache: dict, kind: str, group: np.ndarray, size: int, dtype: str) -> tuple[float, int]:
    """(seconds, SMs held on each GPU) of a collective alone on the cluster, as the step's Traffic runs it; `cache`
    kept by the caller across layouts."""
    key = (kind, group.tobytes(), size, dtype)
    got = cache.get(key)
    if got is None:
        s = Session(cluster, detail="steps")
        op = s.collective(kind, group, size=size, dtype=dtype)
        s.run(op)
        got = cache[key] = (op.record.time, op.record.channels)
    return got


def stream_bound(layout, passes: dict, cluster, alone: dict, spans: list[list[tuple[float, float]]]) -> float:
    """The least time the first and last pipeline rank are ready for the optimizer: their data-parallel streams'
    collectives (what the policy's end waits for) at their times alone, each released no sooner than the passes
    issue them, at `spans` (per rank, (start, end) of each of its computations, each at most as early as the step
    runs it: search.pipeline_bound); 0 when communication costs nothing. `alone`: collective_alone's cache."""
    if layout.config.ideal_network:
        return 0.0
    ranks = sorted({0, layout.dims.pp - 1})  # the ranks the interference bound times alone too (the same cache)
    starts = {r: [s for s, _e in spans[r]] for r in ranks}
    run, _ran, waited = dry_run(layout, passes, ranks, starts, {r: max((e for _s, e in spans[r]), default=0.0)
                                                                for r in ranks})
    out = 0.0
    seconds: dict = {}
    for r in ranks:
        if not waited[r]:
            continue
        # the stream's ends only grow: the last collective waited for ends last, and none after it counts
        n, end = max(waited[r]) + 1, 0.0
        for what, released in zip(run.whats[r][:n], run.released[r][:n]):
            t = seconds.get(what)
            if t is None:
                kind, group, size, dtype = what
                t = seconds[what] = collective_alone(cluster, alone, kind, run.groups[group], size, dtype)[0]
            end = max(end, released) + t
        out = max(out, end * (1 - SLACK))
    return out


__all__ = ["DryRun", "collective_alone", "dry_run", "stream_bound"]
