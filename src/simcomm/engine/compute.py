"""Each GPU's compute stream, slowed while communication kernels hold some of its SMs (the model: sharing.py).

Work queued on one device runs back to back, as on a CUDA stream. A job is a run of kernels, each with its time
alone and its shape (sharing.Kernel). While communication holds SMs of a GPU, each kernel there runs
`slowdown(kernel, held)` times longer. Holding is event-driven: when a communication kernel starts or ends on a
GPU (`occupy`, and the release it returns), the jobs queued there are re-rated from the point each has reached,
as flows are re-shared when one starts or ends; nothing polls. A job costs one event, plus one where a change
moves its end before its pending wake-up, or that wake-up finds it not yet done.

Without sharing (interference off, or a device without SMs) a job's end is fixed when it is queued, as
DeviceQueue always did; the numbers are then exactly those of a plain FIFO.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from .progress import Progress
from .resources import DeviceQueue
from .sharing import COMM_BESIDE_COMPUTE, SPREAD_KERNEL, Kernel, slowdown
from .trace import NO_TAGS


class Mix:
    """What a stretch of compute is made of: kernels run back to back, `weights[i]` of the time alone going to
    `kernels[i]`. Its time under each count of held SMs, as a fraction of its time alone, is computed once
    (cumulative, so a job's progress maps to time by interpolation); build one per kind of work and reuse it."""

    def __init__(self, weights, kernels):
        w = np.atleast_1d(np.asarray(weights, dtype=np.float64))
        kernels = tuple(kernels)
        if len(kernels) != len(w) or not len(w) or (w < 0).any() or not w.sum() > 0:
            raise ValueError(f"a mix needs one non-negative weight per kernel, not all zero; got {len(w)} "
                             f"weight(s) for {len(kernels)} kernel(s)")
        self.kernels = kernels
        self._distinct = tuple(dict.fromkeys(kernels))  # each distinct kernel once, and which one each entry is
        position = {k: i for i, k in enumerate(self._distinct)}
        self._which = np.array([position[k] for k in kernels], dtype=np.int64)
        self.weights = w / w.sum()
        self.cum = np.concatenate([[0.0], np.cumsum(self.weights)])
        self.cum[-1] = 1.0
        self.cum_list = self.cum.tolist()
        self._walls: dict = {}

    def wall(self, state: tuple[int, int], sms: int, hbm: float) -> np.ndarray:
        """Cumulative time at the end of each kernel, per unit of time alone, while (held, margin) SMs are
        taken."""
        return self._wall(state, sms, hbm)[0]

    def wall_list(self, state: tuple[int, int], sms: int, hbm: float) -> list:
        """wall() as a list (for one rank at a time)."""
        return self._wall(state, sms, hbm)[1]

    def _wall(self, state, sms, hbm):
        got = self._walls.get(state)
        if got is None:
            if state[0] <= 0:
                wall = self.cum
            else:
                factors = np.array([_slowdown(k, state[0], state[1], sms, hbm) for k in self._distinct])
                wall = np.concatenate([[0.0], np.cumsum(self.weights * factors[self._which])])
            got = self._walls[state] = (wall, wall.tolist())
        return got


def _interp(x: float, xs: list, ys: list) -> float:
    """np.interp for one point (xs ascending from 0; x within them)."""
    k = min(max(bisect_right(xs, x) - 1, 0), len(xs) - 2)
    x0, x1 = xs[k], xs[k + 1]
    return ys[k] if x1 == x0 else ys[k] + (ys[k + 1] - ys[k]) * (x - x0) / (x1 - x0)


SPREAD_MIX = Mix([1.0], [SPREAD_KERNEL])  # work of unknown shape


def _alike(values: np.ndarray) -> bool:
    """Whether every entry equals the first (a group's few ranks: a list's count beats numpy's reductions)."""
    v = values.tolist()
    return v.count(v[0]) == len(v)


@lru_cache(maxsize=65536)
def _slowdown(kernel: Kernel, held: int, margin: int, sms: int, hbm: float) -> float:
    return slowdown(kernel, held, margin, sms, hbm)


@dataclass(eq=False)
class Job:
    """`seconds` (alone) of `mix` queued on `ranks`: per rank its start and (current) end, and how far it had got
    (`pos`, a fraction of the work) at time `at`."""

    order: int
    ranks: np.ndarray
    mix: Mix
    seconds: float
    start: np.ndarray
    end: np.ndarray
    pos: np.ndarray
    at: np.ndarray
    on_done: Callable
    label: str
    tags: object
    amount: object
    finish: float = 0.0  # when its last rank ends, as now known
    pending: float = 0.0  # when the wake-up it waits for fires
    version: int = 0
    trail: list = field(default_factory=list)  # (indices, at, pos, held, margin) at its start and each re-rate

    def note(self, idx: np.ndarray, held: np.ndarray, margin: np.ndarray) -> None:
        """Where ranks `idx` (indices into `ranks`, an array) stand now and at what SMs taken they go on
        (progress.py); `held` and `margin` are kept as given (callers pass arrays of their own)."""
        self.trail.append((idx, self.at[idx], self.pos[idx], held, margin))


def holding(ranks, sms) -> tuple[np.ndarray, np.ndarray]:
    """(distinct ranks, SMs each holds) of kernels holding `sms` (scalar or one per entry) on `ranks`."""
    ranks = np.asarray(ranks, dtype=np.int64).reshape(-1)
    amount = np.broadcast_to(np.asarray(sms, dtype=np.int64), ranks.shape)
    distinct, inverse = np.unique(ranks, return_inverse=True)
    return distinct, np.bincount(inverse, weights=amount, minlength=len(distinct)).astype(np.int64)


class ComputeQueue(DeviceQueue):
    """The compute stream of every rank (see the module docstring). `sms` and `hbm` describe the device;
    `sharing` turns the slowdown on."""

    def __init__(self, env, num_ranks: int, rate: float, recorder=None, *, sms: int = 0, hbm: float = 0.0,
                 sharing: bool = False):
        super().__init__("compute", num_ranks, rate, recorder)
        self.env = env
        self.sms, self.hbm = int(sms), float(hbm)
        self.sharing = bool(sharing) and self.sms > 0
        self.held = np.zeros(num_ranks, dtype=np.int64)  # SMs communication kernels hold, per rank
        self.margin = np.zeros(num_ranks, dtype=np.int64)  # of which compute is told (userbuffers' SM margin)
        # Unfinished jobs by the ranks they run on (a step queues jobs on the same groups again and again), and the
        # groups each rank has been in: queueing and finishing a job costs one list operation, not one per rank.
        self._groups: dict[bytes, list[Job]] = {}  # ranks' bytes -> their unfinished jobs, in queue order
        self._rank_groups: dict[int, list[bytes]] = {}  # rank -> the keys of _groups it is in
        self._live = 0  # unfinished jobs
        self._mark = np.zeros(num_ranks, dtype=bool)  # scratch, per change: the ranks whose jobs are re-rated
        self._delta = np.zeros(num_ranks, dtype=np.int64)  # ... and what changed on them
        self._delta_margin = np.zeros(num_ranks, dtype=np.int64)
        self._cursor = np.zeros(num_ranks)
        self._order = 0
        self._holdings: dict = {}  # (ranks, SMs) as occupy() gets them -> holding()'s (read-only) arrays
        self.stats = {"compute_jobs": 0, "rerated_jobs": 0}

    # ---- compute -----------------------------------------------------------------------------------------
    def run(self, ranks: np.ndarray, seconds, on_done: Callable[[np.ndarray], None], mix: Mix = SPREAD_MIX,
            label: str = "", tags=NO_TAGS, amount=0.0) -> Progress:
        """Queue `seconds` (alone; scalar or one per rank) of `mix` on each of `ranks` (distinct) now;
        `on_done(ends)` is called once it has run on all of them. Returns where in time the work will have been
        done on each rank (read it once it has ended)."""
        now = self.env.now
        self.stats["compute_jobs"] += 1
        progress = Progress()
        if not self.sharing:
            starts = np.maximum(self.free_at[ranks], now)
            ends = self.use(ranks, amount, now, label, duration=seconds, tags=tags)
            progress.linear(ranks, starts, ends)
            self.env.timeout(max(float(ends.max()) - now, 0.0)).callbacks.append(lambda _e: on_done(ends))
            return progress
        if np.ndim(seconds) == 0:
            progress.job(self._queue(ranks, float(seconds), mix, on_done, label, tags, amount), self.sms, self.hbm)
            return progress
        seconds = np.broadcast_to(np.asarray(seconds, dtype=np.float64), ranks.shape)
        if len(seconds) and (seconds == seconds[0]).all():
            progress.job(self._queue(ranks, float(seconds[0]), mix, on_done, label, tags, amount), self.sms,
                         self.hbm)
            return progress
        # different amounts per rank: one job per amount, done when all are
        values, which = np.unique(seconds, return_inverse=True)
        ends, left = np.empty(len(ranks)), [len(values)]

        def part(where):
            def done(e):
                ends[where] = e
                left[0] -= 1
                if not left[0]:
                    on_done(ends)
            return done
        amounts = np.broadcast_to(np.asarray(amount, dtype=np.float64), ranks.shape)
        for i, value in enumerate(values.tolist()):
            where = np.flatnonzero(which == i)
            progress.job(self._queue(ranks[where], value, mix, part(where), label, tags, amounts[where]), self.sms,
                         self.hbm)
        return progress

    def _queue(self, ranks, seconds: float, mix: Mix, on_done, label, tags, amount) -> Job:
        now = self.env.now
        start = np.maximum(self.free_at[ranks], now)
        held = self.held[ranks]
        end = start + seconds * self._wall_end(mix, ranks) if held.any() else start + seconds
        self.free_at[ranks] = end
        job = Job(self._order, ranks, mix, seconds, start, end, np.zeros(len(ranks)), start.copy(), on_done, label,
                  tags, amount)
        self._order += 1
        job.note(np.arange(len(ranks)), held, self.margin[ranks])
        key = ranks.tobytes()
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = []
            for r in ranks.tolist():
                self._rank_groups.setdefault(r, []).append(key)
        group.append(job)
        self._live += 1
        self._schedule(job)
        return job

    def busy(self, ranks) -> np.ndarray:
        """Whether each of `ranks` has compute running now."""
        return self.free_at[ranks] > self.env.now

    # ---- communication beside it -------------------------------------------------------------------------
    def occupy(self, ranks, sms, margin: bool = False) -> Callable[[], None] | None:
        """Communication kernels take `sms` SMs (scalar, or one per entry of `ranks`; a rank listed twice holds
        both) from now until the returned release is called; `margin`: compute launched meanwhile is sized for
        the SMs left (userbuffers' SM margin). None (nothing to release) without sharing or SMs."""
        if not self.sharing:
            return None
        ranks = np.asarray(ranks, dtype=np.int64).reshape(-1)
        key = (ranks.tobytes(), np.asarray(sms, dtype=np.int64).tobytes(), np.ndim(sms))
        got = self._holdings.get(key)  # a step replays the same collectives on the same groups again and again
        if got is None:
            if len(self._holdings) >= 4096:
                self._holdings.clear()
            got = self._holdings[key] = holding(ranks, sms)
        return self.hold(*got, margin)

    def hold(self, ranks: np.ndarray, sms, margin: bool = False) -> Callable[[], None] | None:
        """occupy() for distinct `ranks` (SMs scalar or one per rank; see `holding`)."""
        if not self.sharing or not len(ranks) or not (sms.any() if isinstance(sms, np.ndarray) else sms):
            return None
        taken = sms if margin else 0
        self._change(ranks, sms, taken)
        return lambda: self._change(ranks, -sms, -taken)

    def beside(self, src: np.ndarray, dst: np.ndarray, intra: np.ndarray):
        """Communication beside compute: for flows src[i] -> dst[i] (intra[i]: inside one node, where the kernel's
        CTAs do the copying), the factor each one's bytes on the wire grow by where either GPU computes now
        (COMM_BESIDE_COMPUTE), and when the first of those computations ends; (None, None) where none does."""
        if not self._live or not intra.any():
            return None, None
        slow = intra & (self.busy(src) | self.busy(dst))
        if not slow.any():
            return None, None
        until = float(np.maximum(self.free_at[src[slow]], self.free_at[dst[slow]]).min())
        return np.where(slow, 1.0 + COMM_BESIDE_COMPUTE, 1.0), until

    def _change(self, ranks: np.ndarray, held, margin) -> None:
        now = self.env.now
        self.held[ranks] += held
        margins = not isinstance(margin, int) or margin != 0  # sends and collectives hold no SM margin
        if margins:
            self.margin[ranks] += margin
        if not self._live:
            return
        computing = self.free_at[ranks] > now
        busy = ranks[computing]
        if not len(busy):
            return
        keys: set[bytes] = set()
        for r in busy.tolist():
            keys.update(self._rank_groups.get(r, ()))
        seen: dict[int, Job] = {}
        for key in keys:
            for j in self._groups[key]:
                seen[j.order] = j
        self._mark[busy] = True
        # what changed on the ranks re-rated (only theirs are read): they had the rates of held - delta
        self._delta[busy] = held if np.ndim(held) == 0 else held[computing]
        if margins:
            self._delta_margin[busy] = margin if np.ndim(margin) == 0 else margin[computing]
        cursor = self._cursor
        cursor[busy] = now
        for key in sorted(seen):
            self._rerate(seen[key], now, cursor)
        self.free_at[busy] = cursor[busy]
        self._mark[busy] = False
        self._delta[busy] = 0
        if margins:
            self._delta_margin[busy] = 0

    def _rerate(self, j: Job, now: float, cursor: np.ndarray) -> None:
        """The marked ranks' progress brought up to now at the rates they had, and their new ends at the rates
        they have, in queue order (cursor: when each rank's earlier jobs end). Progress and time are in units of
        the job's time alone."""
        idx = np.flatnonzero(self._mark[j.ranks] & (j.end > now))
        if not len(idx):
            return
        ranks = j.ranks[idx]
        if len(idx) == 1 or self._in_step(j, idx, ranks, cursor):
            # one rank, or ranks that went through the same (a group's GPUs): one rank's arithmetic for all
            i, r = int(idx[0]), int(ranks[0])
            j.start[idx], j.at[idx], j.pos[idx], j.end[idx] = self._rerate_one(j, i, r, now, float(cursor[r]))
            cursor[ranks] = j.end[idx]
            j.note(idx, self.held[ranks], self.margin[ranks])
        else:
            running = j.start[idx] <= now
            start = np.where(running, j.start[idx], cursor[ranks])  # a queued job starts when the one before ends
            pos, ran = j.pos[idx], (now - j.at[idx]) / j.seconds if j.seconds else np.zeros(len(idx))
            end = np.empty(len(idx))
            cum = j.mix.cum
            for (before, after), where in self._changes(ranks):
                old, new = j.mix.wall(before, self.sms, self.hbm), j.mix.wall(after, self.sms, self.hbm)
                run = running[where]
                p = np.where(run, np.interp(np.interp(pos[where], cum, old) + ran[where], old, cum), pos[where])
                pos[where] = p
                end[where] = np.where(run, now + (new[-1] - np.interp(p, cum, new)) * j.seconds,
                                      start[where] + new[-1] * j.seconds)
            j.pos[idx] = pos
            j.at[idx] = np.where(running, now, start)
            j.start[idx] = start
            j.end[idx] = end
            cursor[ranks] = end
            j.note(idx, self.held[ranks], self.margin[ranks])
        self._schedule(j)

    def _in_step(self, j: Job, idx: np.ndarray, ranks: np.ndarray, cursor: np.ndarray) -> bool:
        """Whether every one of these ranks stands where the first does (same start, progress, SMs and change)."""
        return (_alike(j.start[idx]) and _alike(j.pos[idx]) and _alike(j.at[idx]) and _alike(cursor[ranks])
                and _alike(self.held[ranks]) and _alike(self.margin[ranks]) and _alike(self._delta[ranks])
                and _alike(self._delta_margin[ranks]))

    def _rerate_one(self, j: Job, i: int, r: int, now: float, cursor: float) -> tuple[float, float, float, float]:
        """(start, at, pos, end) of rank r (position i of job j) after the change (see _rerate)."""
        held, margin = int(self.held[r]), int(self.margin[r])
        new = j.mix.wall_list((held, margin), self.sms, self.hbm)
        start = float(j.start[i])
        if start <= now:
            old = j.mix.wall_list((held - int(self._delta[r]), margin - int(self._delta_margin[r])), self.sms,
                                  self.hbm)
            cum = j.mix.cum_list
            ran = (now - float(j.at[i])) / j.seconds if j.seconds else 0.0
            pos = _interp(_interp(float(j.pos[i]), cum, old) + ran, old, cum)
            return start, now, pos, now + (new[-1] - _interp(pos, cum, new)) * j.seconds
        return cursor, cursor, 0.0, cursor + new[-1] * j.seconds  # queued: starts when the one before ends

    def _changes(self, ranks: np.ndarray):
        """((state before, state now), positions) for each distinct change among `ranks`."""
        held, margin = self.held[ranks], self.margin[ranks]
        was, was_margin = held - self._delta[ranks], margin - self._delta_margin[ranks]
        keys = ((was * (self.sms + 1) + was_margin) * (self.sms + 1) + held) * (self.sms + 1) + margin
        if (keys == keys[0]).all():
            yield ((int(was[0]), int(was_margin[0])), (int(held[0]), int(margin[0]))), slice(None)
            return
        for key in np.unique(keys).tolist():
            where = np.flatnonzero(keys == key)
            k = where[0]
            yield ((int(was[k]), int(was_margin[k])), (int(held[k]), int(margin[k]))), where

    def _states(self, ranks: np.ndarray):
        """(state, positions) for each distinct (held, margin) among `ranks`."""
        if not len(ranks):
            return
        held, margin = self.held[ranks], self.margin[ranks]
        if (held == held[0]).all() and (margin == margin[0]).all():
            yield (int(held[0]), int(margin[0])), slice(None)
            return
        keys = held * (self.sms + 1) + margin
        for key in np.unique(keys).tolist():
            yield (key // (self.sms + 1), key % (self.sms + 1)), np.flatnonzero(keys == key)

    def _wall_end(self, mix: Mix, ranks: np.ndarray) -> np.ndarray:
        """Time of a unit of `mix` on each of `ranks` at the SMs they have now."""
        out = np.empty(len(ranks))
        for state, where in self._states(ranks):
            out[where] = mix.wall(state, self.sms, self.hbm)[-1]
        return out

    def _schedule(self, j: Job) -> None:
        """Wake up when j's last rank finishes. A wake-up already pending no later than that stays (it re-arms
        for the rest when it fires): a job slowed and then sped up again costs one more event, not two."""
        finish = float(j.end.max())
        if j.version and finish != j.finish:
            self.stats["rerated_jobs"] += 1
        j.finish = finish
        if j.version and j.pending <= finish:
            return
        j.version += 1
        j.pending = finish
        version = j.version
        self.env.timeout(max(finish - self.env.now, 0.0)).callbacks.append(lambda _e: self._wake(j, version))

    def _wake(self, j: Job, version: int) -> None:
        if version != j.version:
            return  # a later wake-up replaced this one
        if j.finish > j.pending:  # slowed since: wait for the rest
            j.pending = j.finish
            self.env.timeout(max(j.finish - self.env.now, 0.0)).callbacks.append(lambda _e: self._wake(j, version))
            return
        self._done(j)

    def _done(self, j: Job) -> None:
        self._groups[j.ranks.tobytes()].remove(j)
        self._live -= 1
        if self.recorder is not None:
            self.recorder.spans(self.kind, j.ranks, j.start, j.end, j.amount, j.label, j.tags)
        j.on_done(j.end)
