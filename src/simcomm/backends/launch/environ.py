"""os.environ per rank: each rank thread reads and writes its own copy, as each process has its own."""
from __future__ import annotations

import os
from collections.abc import MutableMapping

from .context import current_context


class RankEnviron(MutableMapping):
    """Stands in for os.environ during a launch: a rank thread sees its RankContext.environ, any other thread
    the real environment.

    A rank's writes also reach the process's C environment (putenv/unsetenv), as os.environ's do: C code reads
    variables with getenv() right after Python sets them (Inductor loads each compiled kernel through a variable
    that it sets just before). restore() puts the C environment back as it was when the launch ends."""

    def __init__(self, real):
        self.real = real
        self._touched: set[str] = set()  # variables whose C value a rank changed

    def _target(self):
        ctx = current_context()
        return self.real if ctx is None else ctx.environ

    def __getitem__(self, key):
        return self._target()[key]

    def __setitem__(self, key, value):
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"str expected, not {type(value if isinstance(key, str) else key).__name__}")
        self._target()[key] = value
        if self._target() is not self.real:
            self._touched.add(key)
            os.putenv(key, value)

    def __delitem__(self, key):
        del self._target()[key]
        if self._target() is not self.real:
            self._touched.add(key)
            os.unsetenv(key)

    def restore(self) -> None:
        """The C environment as the real os.environ says (what the ranks wrote there undone)."""
        for key in self._touched:
            if key in self.real:
                os.putenv(key, self.real[key])
            else:
                os.unsetenv(key)
        self._touched.clear()

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
