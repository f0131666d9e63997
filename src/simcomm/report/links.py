"""Link usage from a timeline: bytes per link and a piecewise-constant rate over time.

A flow's rate is taken as its bytes over its lifetime (start to arrival), so a flow slowed by sharing shows its
average rate; sums over the flows on a link give the link's load.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class LinkUsage:
    link: int
    name: str
    capacity: float  # bytes/s
    nbytes: float  # bytes carried
    times: np.ndarray  # change points, seconds
    rates: np.ndarray  # bytes/s from times[i] to times[i+1]

    def utilisation(self, span: float) -> float:
        """Average fraction of capacity used over `span` seconds."""
        return self.nbytes / (self.capacity * span) if span > 0 and self.capacity > 0 else 0.0


def link_usage(activities, cluster) -> list[LinkUsage]:
    """Every link that carried a flow, most utilised first (bytes over capacity; ties by link id), so a slow
    bottleneck link ranks above a fast link that carried more bytes."""
    changes: dict[int, list] = {}
    carried: dict[int, float] = {}
    for a in activities:
        if a.kind != "send" or not a.links or a.end <= a.start:
            continue
        rate = a.nbytes / (a.end - a.start)
        for link in a.links:
            changes.setdefault(link, []).extend(((a.start, rate), (a.end, -rate)))
            carried[link] = carried.get(link, 0.0) + a.nbytes
    out = []
    for link, ch in changes.items():
        ch.sort()
        t = np.array([c[0] for c in ch])
        r = np.cumsum([c[1] for c in ch])
        keep = np.append(t[1:] != t[:-1], True)  # one value per instant: the last
        r = np.clip(r[keep], 0.0, None)
        out.append(LinkUsage(link, cluster.link_name(link), float(cluster.link_capacity[link]), carried[link],
                             t[keep], r))
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
