"""Link usage from the rates the flow engine assigned: each link's load over time as a step function.

The loads come from the recorder (`Recorder.link_loads`, kept with "flows" detail): every max-min solve, and every
segment of a replayed trajectory, sets the load of the links it changed. So a link's load never exceeds its
capacity, and a link shared by several flows shows their sum as the solver split it. Loads are wire bytes (a
protocol's flag bytes included).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LinkUsage:
    link: int
    name: str
    capacity: float  # bytes/s
    nbytes: float  # wire bytes carried
    times: np.ndarray  # change points, seconds
    rates: np.ndarray  # bytes/s from times[i] to times[i+1] (and 0 after the last)

    def utilisation(self, span: float) -> float:
        """Average fraction of capacity used over `span` seconds."""
        return self.nbytes / (self.capacity * span) if span > 0 and self.capacity > 0 else 0.0

    @property
    def peak(self) -> float:
        """The highest fraction of capacity the link ever ran at."""
        return float(self.rates.max()) / self.capacity if len(self.rates) and self.capacity > 0 else 0.0


def link_usage(link_loads, cluster) -> list[LinkUsage]:
    """Every link that carried load, most utilised first (bytes over capacity; ties by link id), so a slow
    bottleneck link ranks above a fast link that carried more bytes. `link_loads` is a Recorder's (None when the
    run kept only steps: then there is nothing to show)."""
    if link_loads is None:
        return []
    out = []
    for link, (t, r) in link_loads.steps().items():
        carried = float(np.sum(r[:-1] * np.diff(t)))
        if carried <= 0:
            continue
        out.append(LinkUsage(link, cluster.link_name(link), float(cluster.link_capacity[link]), carried, t, r))
    out.sort(key=lambda u: (-(u.nbytes / u.capacity if u.capacity > 0 else 0.0), u.link))
    return out


def binned(u: LinkUsage, start: float, end: float, bins: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(bin edges, average rate in each bin) of a link's piecewise-constant rate: cheap to plot, exact averages."""
    edges = np.linspace(start, end, bins + 1)
    if end <= start or not len(u.times):
        return edges, np.zeros(bins)
    # integral of the rate from the first change point up to each change point
    area = np.concatenate([[0.0], np.cumsum(u.rates[:-1] * np.diff(u.times))])
    at = np.interp(edges, u.times, area)  # the rate is 0 after the last change point, so this is exact
    return edges, np.diff(at) / np.diff(edges)
