"""Pipeline point-to-point: activations forward to the next model stage, gradients back to the previous one.

Where the next stage lives is the schedule's placement (actions.py): the next pipeline rank in Megatron's loop
(chunk + 1 after the last rank), the previous one on the way back up a V, either neighbour in DualPipe. Sends are
asynchronous (isend; waited at the end of the step), receives block when the schedule needs the data: no order of
sends can deadlock a schedule whose dependencies can be met. Activations and gradients use different p2p tags,
since both travel between the same pair of ranks; between two ranks each kind is received in the order it is sent
(timeline.check).
"""
from __future__ import annotations

ACTIVATION_TAG, GRADIENT_TAG = 0, 1


class StageLinks:
    """Who sends to whom, for one pipeline rank (global ranks of its pipeline group)."""

    def __init__(self, comm, pp_ranks, pp_rank: int):
        self.comm = comm
        self.ranks = [int(r) for r in pp_ranks]
        self.p, self.rank = len(self.ranks), pp_rank
        self._sends = []

    def send(self, x, to: int, tag: int) -> None:
        """x to pipeline rank `to` (asynchronous)."""
        with self.comm.tagged(axis="pp"):
            self._sends.append(self.comm.isend(x, self.ranks[to], tag))

    def recv(self, shape, like, source: int, tag: int):
        with self.comm.tagged(axis="pp"):
            return self.comm.recv(shape, like, self.ranks[source], tag)

    def wait_sends(self) -> None:
        for s in self._sends:
            s.wait()
        self._sends.clear()
