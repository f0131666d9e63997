"""numpy helpers every layer may use.

`unique` is np.unique(x) by sorting: numpy 2's np.unique without inverse or counts hashes, which on 10^6 distinct
integers took 1.9 s where a sort takes 0.02 s (numpy 2.4)."""
from __future__ import annotations

import numpy as np


def unique(x) -> np.ndarray:
    """The sorted distinct values of an integer array (flattened), as np.unique(x) gives them."""
    s = np.sort(np.asarray(x).reshape(-1))
    if len(s) < 2:
        return s
    keep = np.empty(len(s), dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def filled(value, shape, dtype=np.float64) -> np.ndarray:
    """A new array of `shape` holding `value` (a scalar, or an array that broadcasts to it): np.broadcast_to(value,
    shape).copy() without broadcast_to's cost (a few microseconds) in the common scalar case."""
    if np.ndim(value) == 0:
        return np.full(shape, value, dtype=dtype)
    return np.broadcast_to(np.asarray(value, dtype=dtype), shape).copy()
