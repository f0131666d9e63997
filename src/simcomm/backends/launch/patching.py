"""Swap module attributes for the length of a launch and put every one back afterwards."""
from __future__ import annotations

_MISSING = object()


class Patcher:
    """Records each replaced attribute; restore() undoes them in reverse order (also after an error)."""

    def __init__(self):
        self._saved: list[tuple[object, str, object]] = []

    def set(self, owner, name: str, value) -> None:
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type)
                            else getattr(owner, name, _MISSING)))
        setattr(owner, name, value)

    def restore(self) -> None:
        while self._saved:
            owner, name, old = self._saved.pop()
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
