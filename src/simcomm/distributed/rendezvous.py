"""Matches the k-th collective call of every member of a group, checks they agree, then runs it once.

When every member has arrived, ranks whose call differs from the others' (another collective, shape, dtype, data
or size-only, op or root) make the call fail with a MismatchError that names them first (the minority is at
fault) and shows what each side called. Argument errors that only the whole call reveals (an all_to_all whose
split sizes do not pair up) fail it the same way. A failed call raises its error in every rank of the call, the
ones already waiting and the ones still to arrive, as a real backend would raise in every process.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import DistError, MismatchError


@dataclass(eq=False)
class _Call:
    group: object
    index: int
    done: object
    arrivals: dict = field(default_factory=dict)  # global rank -> (name, signature, payload)
    tags: dict = field(default_factory=dict)  # global rank -> its tags (clock.tagged) when it arrived
    busy: dict = field(default_factory=dict)  # global rank -> the compute it had queued when it arrived


def _common(tag_sets: list) -> dict:
    """The tags (key and value) every member's call carries."""
    first = tag_sets[0] if tag_sets else {}
    return {k: v for k, v in first.items() if all(k in t and t[k] == v for t in tag_sets[1:])}


def _format(name: str, signature: dict) -> str:
    return f"{name}(" + ", ".join(f"{k}={v}" for k, v in signature.items()) + ")"


def _ranks(rs) -> str:
    rs = sorted(rs)
    return f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"


def _sides(call: _Call) -> list[tuple[str, list[int]]]:
    """What each set of ranks called, largest set first (ties: the first to arrive first)."""
    sides: dict[str, list[int]] = {}
    for r, (name, sig, _) in call.arrivals.items():
        sides.setdefault(_format(name, sig), []).append(r)
    return sorted(sides.items(), key=lambda kv: -len(kv[1]))


class CollectiveRendezvous:
    """Open collective calls of one run, keyed by (group, call index)."""

    def __init__(self, runtime):
        self.rt = runtime
        self._count: dict[tuple[int, int], int] = {}
        self._open: dict[tuple[int, int], _Call] = {}

    def arrive(self, rank: int, group, name: str, signature: dict, payload, run, tags=None):
        """Register rank's call; when the last member arrives, `run(call_payloads_in_group_order, done)` starts,
        with `launch_tags` (the tags every member arrived with, see clock.tagged) and `launch_after` (the compute
        each member had queued when it arrived: the collective waits for that, not for compute a member queued
        after it issued the call, as an NCCL kernel waits only on the stream work enqueued before it) in the
        runtime's services.

        Returns (event that fires when the collective completes, or fails with the call's error; a callable
        describing what rank waits for).
        """
        gid = id(group)
        index = self._count.get((gid, rank), 0)
        self._count[(gid, rank)] = index + 1
        call = self._open.get((gid, index))
        if call is None:
            call = self._open[(gid, index)] = _Call(group, index, self.rt.env.event())
        call.arrivals[rank] = (name, signature, payload)
        call.tags[rank] = tags or {}
        call.busy[rank] = self.rt.device_busy(rank)
        if len(call.arrivals) == group.size():
            del self._open[(gid, index)]
            self._complete(call, run)

        def what(call=call, name=name):
            missing = [r for r in group.ranks if r not in call.arrivals]
            tail = f", waiting for {_ranks(missing)}" if missing else ""
            sides = _sides(call)
            disagree = "; they disagree: " + "; ".join(f"{_ranks(rs)} called {text}" for text, rs in sides) \
                if len(sides) > 1 else ""
            return f"{name} on {group.name} (call #{call.index + 1}{tail}{disagree})"

        return call.done, what

    def _complete(self, call: _Call, run) -> None:
        sides = _sides(call)
        if len(sides) > 1:
            blamed = sorted(r for _, rs in sides[1:] for r in rs)
            parts = [f"{_ranks(rs)} called {text}{self._handling(rs)}" for text, rs in sides]
            self._fail(call, MismatchError(f"{_ranks(blamed)}: collective mismatch on {call.group.name} at call "
                                           f"#{call.index + 1}: " + "; ".join(parts)))
            return
        payloads = [call.arrivals[r][2] for r in call.group.ranks]
        self.rt.services["launch_tags"] = _common([call.tags[r] for r in call.group.ranks])
        self.rt.services["launch_after"] = [op for r in call.group.ranks for op in call.busy[r]]
        try:
            run(payloads, call.done)
        except DistError as exc:  # found only now that every argument is known: every rank of the call raises it
            self._fail(call, exc)
        finally:
            self.rt.services.pop("launch_tags", None)
            self.rt.services.pop("launch_after", None)

    def _handling(self, ranks) -> str:
        """' (rank r while handling E: message; ...)' for ranks that made the call from cleanup code, so the error
        that led them there shows in the message (as in a deadlock report), not only in __context__."""
        notes = []
        for r in sorted(ranks):
            exc = self.rt.handling(r)
            if exc is not None:
                text = str(exc)
                notes.append(f"rank {r} while handling {type(exc).__name__}: "
                             + (text if len(text) <= 200 else text[:197] + "..."))
        return f" ({'; '.join(notes)})" if notes else ""

    @staticmethod
    def _fail(call: _Call, error: BaseException) -> None:
        call.done.fail(error)
        call.done.defused = True  # raised in the ranks (runtime.wait), not by the event loop
