"""Pipeline point-to-point: activations forward to the next virtual stage, gradients back to the previous one.

Virtual stage s = chunk * p + pipeline rank, so stage s + 1 lives on pipeline rank (r + 1) mod p (chunk + 1 after
the last rank). Sends are asynchronous (isend; waited at the end of the step), receives block when the schedule
needs the data: no order of sends can deadlock a schedule whose dependencies can be met. Activations and
gradients use different p2p tags, since with two pipeline ranks both travel between the same pair of ranks.
"""
from __future__ import annotations

ACTIVATION_TAG, GRADIENT_TAG = 0, 1


class StageLinks:
    """Who sends to whom, for one pipeline rank (global ranks of its pipeline group)."""

    def __init__(self, comm, pp_ranks, pp_rank: int):
        self.comm = comm
        self.ranks = [int(r) for r in pp_ranks]
        self.p, self.rank = len(self.ranks), pp_rank
        self.next = self.ranks[(pp_rank + 1) % self.p]
        self.prev = self.ranks[(pp_rank - 1) % self.p]
        self._sends = []

    def _tagged(self):
        return self.comm.tagged(axis="pp")

    def send_activation(self, x) -> None:
        with self._tagged():
            self._sends.append(self.comm.isend(x, self.next, ACTIVATION_TAG))

    def recv_activation(self, shape, like):
        with self._tagged():
            return self.comm.recv(shape, like, self.prev, ACTIVATION_TAG)

    def send_gradient(self, dx) -> None:
        with self._tagged():
            self._sends.append(self.comm.isend(dx, self.prev, GRADIENT_TAG))

    def recv_gradient(self, shape, like):
        with self._tagged():
            return self.comm.recv(shape, like, self.next, GRADIENT_TAG)

    def wait_sends(self) -> None:
        for s in self._sends:
            s.wait()
        self._sends.clear()
