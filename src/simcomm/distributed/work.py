"""Work: the handle an asynchronous call returns, as in torch.distributed (and the Future it can give)."""
from __future__ import annotations

import datetime
import math

from ..errors import DistError


def _seconds(timeout) -> float | None:
    """A timeout as simulated seconds (a timedelta or a number); None or zero means no timeout, as in torch."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise DistError(f"Work.wait: timeout must be a datetime.timedelta or seconds, got {timeout!r}")
    if math.isnan(seconds) or seconds < 0:
        raise DistError(f"Work.wait: timeout must be >= 0, got {timeout!r}")
    return None if seconds == 0 or math.isinf(seconds) else seconds


class Future:
    """torch.futures.Future's reading side for a completed-or-pending Work: wait(), value(), done(), then()."""

    def __init__(self, work: Work, value):
        self._work = work
        self._value = value

    def wait(self):
        self._work.wait()
        return self._value

    def value(self):
        return self.wait()

    def done(self) -> bool:
        return self._work.is_completed()

    def then(self, callback):
        """Run callback(self) once complete (at the caller's next wait) and return a Future of its result."""
        return _Then(self, callback)

    def add_done_callback(self, callback) -> None:
        self.then(callback)


class _Then(Future):
    def __init__(self, parent: Future, callback):
        super().__init__(parent._work, None)
        self._parent, self._callback, self._ran = parent, callback, False

    def wait(self):
        self._parent.wait()
        if not self._ran:
            self._value, self._ran = self._callback(self._parent), True
        return self._value


class Work:
    """Completes when its operation has finished in simulated time.

    wait(timeout) waits at most `timeout` of simulated time and then raises, as gloo does ("Timed out waiting
    ..."); is_completed() is True once the operation finished (or failed); polling it lets simulated time advance.
    """

    def __init__(self, runtime, rank: int, event, what, outputs=None):
        self._runtime = runtime
        self._rank = rank
        self._event = event
        self._what = what
        self._outputs = outputs  # what get_future() gives (collectives' output tensors); None: no future
        self._error: BaseException | None = None

    def _describe(self) -> str:
        return self._what() if callable(self._what) else self._what

    def wait(self, timeout=None) -> bool:
        """Block the calling rank until the operation completes (or `timeout` of simulated time passes, then
        raise); returns True."""
        if self._error is not None:
            raise self._error
        seconds = _seconds(timeout)
        if seconds is None or self._event.processed:
            self._runtime.wait(self._rank, self._event, self._what)
            return True
        env = self._runtime.env
        timer = env.timeout(seconds)
        self._runtime.wait(self._rank, env.any_of([self._event, timer]), self._what)
        if self._event.processed:
            if not self._event.ok:
                raise self._event.value
            return True
        self._error = DistError(f"rank {self._rank}: Timed out waiting {seconds * 1e3:g}ms (simulated) for "
                                f"{self._describe()} to complete")
        raise self._error

    def is_completed(self) -> bool:
        """True once the operation has completed; while it has not, simulated time moves on (see poll)."""
        if self._error is not None:
            return True
        return self._runtime.poll(self._rank, self._event, self._what)

    def is_success(self) -> bool:
        return self.is_completed() and self.exception() is None

    def exception(self):
        """The error the operation ended with, or None."""
        if self._error is not None:
            return self._error
        if self._event.processed and not self._event.ok:
            return self._event.value
        return None

    def synchronize(self) -> None:
        self.wait()

    def result(self):
        self.wait()
        return self._event.value

    def source_rank(self) -> int:
        """For a completed receive: the global rank that sent the data."""
        self.wait()
        value = self._event.value
        if not isinstance(value, int):
            raise DistError("source_rank() is only defined for completed receives")
        return value

    def get_future(self) -> Future:
        """A Future completed with the collective's output tensors (gloo gives none for send/recv)."""
        if self._outputs is None:
            raise DistError("Work::getFuture not implemented.")
        return Future(self, self._outputs)

    def __repr__(self) -> str:
        done = self._event.processed or self._error is not None
        return f"Work({self._describe()}, {'completed' if done else 'pending'})"
