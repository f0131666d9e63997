"""Where in time a compute job did its work, rank by rank: the map from offsets into the work (seconds it takes
alone, from its start) to the simulated times they were reached, its slowdowns included.

A job runs its Mix's kernels back to back; while communication holds SMs of its GPU each kernel runs slower by its
own factor, idle waits do not (compute.py). The compute queue notes, each time it re-rates a job on some ranks,
where each had got (`pos`, a fraction of the work) and at what SMs taken it goes on; between two such notes the
job runs at one state, so an offset maps to time through that state's cumulative wall table. A trace uses this to
place the kernels of a long job (a pipeline pass of many layers) where they ran.
"""
from __future__ import annotations

import numpy as np


class Progress:
    """The progress of one compute operation on each of its ranks (see the module docstring)."""

    def __init__(self):
        self._linear: dict[int, tuple[float, float]] = {}  # rank -> (start, end): ran at one rate
        self._jobs: dict[int, tuple[object, int, int, float]] = {}  # rank -> (job, its index there, sms, hbm)
        self._queued: list = []  # (job, sms, hbm) not yet in _jobs: most progress is never read

    def linear(self, ranks, starts, ends) -> None:
        """Ranks whose work ran unslowed from starts[i] to ends[i]."""
        for r, s, e in zip(np.atleast_1d(ranks).tolist(), np.broadcast_to(starts, np.shape(ranks)).tolist(),
                           np.broadcast_to(ends, np.shape(ranks)).tolist()):
            self._linear[r] = (s, e)

    def job(self, job, sms: int, hbm: float) -> None:
        """Ranks of a compute-queue Job (its trail of breakpoints is read when asked)."""
        self._queued.append((job, sms, hbm))

    def _by_rank(self) -> dict:
        for job, sms, hbm in self._queued:
            for i, r in enumerate(job.ranks.tolist()):
                self._jobs[r] = (job, i, sms, hbm)
        self._queued.clear()
        return self._jobs

    @property
    def ranks(self) -> list[int]:
        return sorted({*self._linear, *self._by_rank()})

    def times(self, rank: int, offsets) -> np.ndarray:
        """Simulated times at which rank `rank` reached `offsets` (seconds of work alone from the start, within
        0..the work's length) once the operation has ended."""
        offsets = np.asarray(offsets, dtype=np.float64)
        if rank in self._linear:
            start, end = self._linear[rank]
            return np.minimum(start + offsets, end)
        job, i, sms, hbm = self._by_rank()[rank]
        end = float(job.end[i])
        if not job.seconds:
            return np.full(offsets.shape, end)
        pos = offsets / job.seconds
        points = breakpoints(job.trail, i)
        at = np.array([p[0] for p in points])
        starts = np.array([p[1] for p in points])
        k = np.clip(np.searchsorted(starts, pos, side="right") - 1, 0, len(points) - 1)
        out = np.empty(pos.shape)
        cum = job.mix.cum
        for n in np.unique(k).tolist():
            where = k == n
            wall = job.mix.wall(points[n][2], sms, hbm)
            out[where] = at[n] + (np.interp(pos[where], cum, wall) - np.interp(starts[n], cum, wall)) * job.seconds
        out[pos >= 1.0] = end
        return np.minimum(out, end)


def breakpoints(trail: list, i: int) -> list[tuple[float, float, tuple[int, int]]]:
    """(time, position, (held, margin) SMs from then on) where the job at index i of its ranks started or was
    re-rated, in order; a note at position 0 (the job still queued, its start moved) replaces those before it."""
    out: list = []
    for idx, at, pos, held, margin in trail:
        k = int(np.searchsorted(idx, i))
        if k < len(idx) and idx[k] == i:
            if pos[k] == 0.0:
                out = []
            out.append((float(at[k]), float(pos[k]), (int(held[k]), int(margin[k]))))
    return out


__all__ = ["Progress", "breakpoints"]
