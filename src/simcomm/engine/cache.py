"""A memo bounded in entries and in bytes, for the engine's and executors' per-pattern caches.

Keys are flow patterns (bytes of the flows' ranks): a collective that repeats its step hits one entry, but a plan
whose every stage is new (a pipelined tree on 16,384 GPUs: hundreds of stages of 10^5 flows) would otherwise keep
megabytes per stage until the run ends. Past `max_entries` the cache starts afresh, as the engine always did;
past `max_bytes` the oldest entries go first, so only very large runs ever see a difference, and only in speed.
"""
from __future__ import annotations

import numpy as np

MAX_ENTRIES = 4096
MAX_BYTES = 64 << 20


def footprint(obj) -> int:
    """Bytes held by a key or value: arrays and bytes by size, containers by their items, anything else 64."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, (tuple, list)):
        return sum(footprint(x) for x in obj)
    arrays = getattr(obj, "__dict__", None)
    if arrays is not None:
        return sum(footprint(x) for x in arrays.values())
    fields = getattr(obj, "_fields", None) or getattr(obj, "__dataclass_fields__", None)
    if fields:
        return sum(footprint(getattr(obj, f)) for f in fields)
    return 64


class BoundedCache:
    """get/put memo: at most `max_entries` entries (then cleared) and about `max_bytes` (oldest out first)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._data: dict = {}
        self._sizes: dict = {}
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key) -> bool:
        return key in self._data

    def __getitem__(self, key):
        return self._data[key]

    def get(self, key, default=None):
        return self._data.get(key, default)

    def put(self, key, value):
        """Store value under key (returns value)."""
        if key in self._data:
            self.nbytes -= self._sizes.pop(key)
            del self._data[key]
        if len(self._data) > self.max_entries:
            self.clear()
        size = footprint(key) + footprint(value)
        while self._data and self.nbytes + size > self.max_bytes:
            old = next(iter(self._data))
            self.nbytes -= self._sizes.pop(old)
            del self._data[old]
        self._data[key] = value
        self._sizes[key] = size
        self.nbytes += size
        return value

    def clear(self) -> None:
        self._data.clear()
        self._sizes.clear()
        self.nbytes = 0
