"""np.unique for non-negative integer ids below a known bound, by a table instead of a sort where that is cheaper.

The engine factorizes route and link ids on every solve; with 10^5 flows a sort (or numpy's hash) per call was the
largest cost of a 16,384-GPU tree all-reduce. Results are exactly np.unique's: sorted values, dense inverse.
"""
from __future__ import annotations

import numpy as np

from ..arrays import unique


def _table_pays(bound: int, size: int) -> bool:
    return bound <= 4 * size + (1 << 20)


def _table_finds(bound: int, size: int) -> bool:
    return bound <= 32 * size + (1 << 16)  # a bool table and a scan beat a sort by far below this


def distinct(ids: np.ndarray, bound: int) -> np.ndarray:
    """np.unique(ids) for ids in [0, bound)."""
    if not _table_finds(bound, len(ids)):
        return unique(ids)
    seen = np.zeros(bound, dtype=bool)
    seen[ids] = True
    return np.flatnonzero(seen)


def factorize(ids: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(ids, return_inverse=True) for ids in [0, bound): (sorted distinct values, index of each id)."""
    if not _table_pays(bound, len(ids)):
        values, inverse = np.unique(ids, return_inverse=True)
        return values, inverse.reshape(-1)
    seen = np.zeros(bound, dtype=bool)
    seen[ids] = True
    values = np.flatnonzero(seen)
    dense = np.empty(bound, dtype=np.int64)  # only the entries of values are written (not a cumsum over bound)
    dense[values] = np.arange(len(values))
    return values, dense[ids]
