"""Work: the handle an asynchronous call returns, as in torch.distributed."""
from __future__ import annotations


class Work:
    """Completes when its operation has finished in simulated time."""

    def __init__(self, runtime, rank: int, event, what: str):
        self._runtime = runtime
        self._rank = rank
        self._event = event
        self._what = what

    def wait(self, timeout=None) -> bool:
        """Block the calling rank until the operation completes; returns True."""
        self._runtime.wait(self._rank, self._event, self._what)
        return True

    def is_completed(self) -> bool:
        """True once the operation has completed at the caller's current simulated time."""
        return self._event.processed

    def is_success(self) -> bool:
        return self.is_completed()

    def result(self):
        self.wait()
        return self._event.value

    def __repr__(self) -> str:
        return f"Work({self._what}, {'completed' if self.is_completed() else 'pending'})"
