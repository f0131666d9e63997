"""Matches the k-th collective call of every member of a group, checks they agree, then runs it once.

A rank whose call differs from the others' (another collective, shape, dtype, op or root) stops the run with an
error naming the ranks on each side, instead of hanging as a real backend may.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import MismatchError


@dataclass(eq=False)
class _Call:
    name: str
    group: object
    index: int
    done: object
    arrivals: dict = field(default_factory=dict)  # global rank -> (signature, payload)


def _format(name: str, signature: dict) -> str:
    return f"{name}(" + ", ".join(f"{k}={v}" for k, v in signature.items()) + ")"


class CollectiveRendezvous:
    """Open collective calls of one run, keyed by (group, call index)."""

    def __init__(self, runtime):
        self.rt = runtime
        self._count: dict[tuple[int, int], int] = {}
        self._open: dict[tuple[int, int], _Call] = {}

    def arrive(self, rank: int, group, name: str, signature: dict, payload, run):
        """Register rank's call; when the last member arrives, `run(call_payloads_in_group_order, done)` starts.

        Returns (event that fires when the collective completes, a callable describing what rank waits for).
        """
        gid = id(group)
        index = self._count.get((gid, rank), 0)
        self._count[(gid, rank)] = index + 1
        call = self._open.get((gid, index))
        if call is None:
            call = self._open[(gid, index)] = _Call(name, group, index, self.rt.env.event())
        call.arrivals[rank] = (signature, payload)
        first_rank, (first_sig, _) = next(iter(call.arrivals.items()))
        if name != call.name or signature != first_sig:
            self._mismatch(call, rank, name, signature)
        if len(call.arrivals) == group.size():
            del self._open[(gid, index)]
            payloads = [call.arrivals[r][1] for r in group.ranks]
            run(payloads, call.done)

        def what(call=call, name=name):
            missing = [r for r in group.ranks if r not in call.arrivals]
            tail = f", waiting for rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}" \
                if missing else ""
            return f"{name} on {group.name} (call #{call.index + 1}{tail})"

        return call.done, what

    def _mismatch(self, call: _Call, rank: int, name: str, signature: dict) -> None:
        sides: dict[str, list[int]] = {}
        for r, (sig, _) in call.arrivals.items():
            text = _format(call.name if r != rank else name, sig)
            sides.setdefault(text, []).append(r)
        parts = [f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, sorted(rs)))} called {text}"
                 for text, rs in sides.items()]
        self.rt.fail(MismatchError(f"collective mismatch on {call.group.name} at call #{call.index + 1}: "
                                   + "; ".join(parts)))
