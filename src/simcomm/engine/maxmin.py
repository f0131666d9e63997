"""Max-min fair rates for flows over capacitated links (progressive filling, vectorised with numpy).

Flows that follow the same route always get the same rate, so the solver works on route classes weighted by
their flow counts: the cost grows with distinct routes and bottleneck levels, not with flows.
"""
from __future__ import annotations

import numpy as np

from .ids import factorize

_SATURATED = 1e-9  # relative residual below which a link counts as full
_PRIVATE_FROM = 1 << 14  # pairs from which dropping dominated private links pays


def max_min_rates(class_links: list[np.ndarray], counts: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Per-flow rate of each class. `class_links[c]` are the links class c crosses; `counts[c]` its flows
    (a positive number; weighted flows count as several).

    A class with no links (nothing to cross) gets an infinite rate.
    """
    num = len(class_links)
    lengths = np.fromiter((len(x) for x in class_links), dtype=np.int64, count=num)
    flat = np.concatenate([x for x in class_links if len(x)]) if lengths.any() else np.empty(0, np.int64)
    return _fill(lengths, flat, counts, capacity)


def max_min_rates_csr(lengths: np.ndarray, starts: np.ndarray, links: np.ndarray, counts: np.ndarray,
                      capacity: np.ndarray) -> np.ndarray:
    """max_min_rates with class c's links given as links[starts[c]:starts[c] + lengths[c]] (no Python loop)."""
    total = int(lengths.sum())
    offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return _fill(lengths, links[np.arange(total) + offsets], counts, capacity)


def _fill(lengths: np.ndarray, pair_link_global: np.ndarray, counts: np.ndarray, capacity: np.ndarray):
    """Progressive filling over (class, link) pairs listed class by class.

    Every round raises the rate of the unfrozen classes by the same delta, so a class's rate is the running sum of
    the deltas up to the round it froze in (kept as one `level`, added in the same order); the pairs of frozen
    classes are dropped as they freeze, so later rounds cost what is left."""
    num = len(lengths)
    rates = np.zeros(num)
    empty = lengths == 0
    rates[empty] = np.inf
    if empty.all():
        return rates
    pair_class = np.repeat(np.arange(num), lengths)
    if 4 * len(pair_link_global) >= len(capacity):  # dense: index the links directly (no sort)
        links, pair_link = np.arange(len(capacity)), pair_link_global
    else:
        links, pair_link = factorize(pair_link_global, len(capacity))
    residual = capacity[links].astype(np.float64)
    full = capacity[links] * _SATURATED
    weight = np.asarray(counts, dtype=np.float64)[pair_class]
    if len(pair_link) > _PRIVATE_FROM:
        pair_class, pair_link, weight = _drop_dominated(lengths, pair_class, pair_link, weight, residual)
    level = 0.0
    while len(pair_class):
        load = np.bincount(pair_link, weights=weight, minlength=len(links))
        used = load > 0
        share = residual[used] / load[used]
        delta = share.min()
        level += delta
        residual -= delta * load
        saturated = used & (residual <= full)
        newly = np.zeros(num, dtype=bool)
        newly[pair_class[saturated[pair_link]]] = True
        if not newly.any():  # numerical safety: freeze the classes on the tightest link
            tight = used.copy()
            tight[used] = share <= delta * (1 + 1e-12)
            newly[pair_class[tight[pair_link]]] = True
        rates[newly] = level
        keep = ~newly[pair_class]
        pair_class, pair_link, weight = pair_class[keep], pair_link[keep], weight[keep]
    return rates


def _drop_dominated(lengths, pair_class, pair_link, weight, capacity):
    """Leave out the links only one class crosses, except one of its narrowest: such links carry the same load, so
    the narrowest always has the smallest share and saturates first (its residual stays the smallest: the same
    amounts come off each; equal ones saturate together), and the others never decide a round. A 131,072-GPU step whose every flow crosses
    six links of its own then fills over about a third of the pairs; the rates are the same floats."""
    private = np.bincount(pair_link, minlength=len(capacity))[pair_link] == 1
    if not private.any():
        return pair_class, pair_link, weight
    own = np.where(private, capacity[pair_link], np.inf)
    nonempty = lengths > 0
    starts = (np.cumsum(lengths) - lengths)[nonempty]
    narrowest = np.full(len(lengths), np.inf)
    narrowest[nonempty] = np.minimum.reduceat(own, starts)
    # one narrowest private link per class (equal ones saturate together: the same floats come off each)
    index = np.where(private & (own == narrowest[pair_class]), np.arange(len(own)), len(own))
    first = np.full(len(lengths), len(own))
    first[nonempty] = np.minimum.reduceat(index, starts)
    keep = ~private | (np.arange(len(own)) == first[pair_class])
    return pair_class[keep], pair_link[keep], weight[keep]
