"""os.environ per rank: each rank thread reads and writes its own copy, as each process has its own."""
from __future__ import annotations

from collections.abc import MutableMapping

from .context import current_context


class RankEnviron(MutableMapping):
    """Stands in for os.environ during a launch: a rank thread sees its RankContext.environ, any other thread
    the real environment."""

    def __init__(self, real):
        self.real = real

    def _target(self):
        ctx = current_context()
        return self.real if ctx is None else ctx.environ

    def __getitem__(self, key):
        return self._target()[key]

    def __setitem__(self, key, value):
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"str expected, not {type(value if isinstance(key, str) else key).__name__}")
        self._target()[key] = value

    def __delitem__(self, key):
        del self._target()[key]

    def __iter__(self):
        return iter(list(self._target()))

    def __len__(self):
        return len(self._target())

    def copy(self) -> dict:
        return dict(self._target())

    def __repr__(self) -> str:
        return f"environ({dict(self._target())!r})"

    def snapshot(self) -> dict:
        """The calling thread's environment as a new dict (what a child process would inherit)."""
        return dict(self._target())
