"""Passing blocks around the context-parallel ring: one packed message to the next rank, one from the previous."""
from __future__ import annotations

from ..rank_comm import Handle, pack, unpack


class Ring:
    def __init__(self, comm, ranks, rank: int):
        self.comm = comm
        self.ranks = [int(r) for r in ranks]
        n = len(self.ranks)
        self.next, self.prev = self.ranks[(rank + 1) % n], self.ranks[(rank - 1) % n]

    def shift(self, arrays) -> Handle:
        """Send `arrays` (packed in one message) to the next rank and receive the previous rank's; the handle's
        wait() returns the received arrays, shaped like these."""
        arrays = list(arrays)
        buf = pack(arrays)
        with self.comm.tagged(axis="cp"):
            recv = self.comm.irecv(buf.shape, buf, self.prev, tag=2)
            send = self.comm.isend(buf, self.next, tag=2)

        def finish():
            send.wait()
            return unpack(recv.wait(), arrays)
        return Handle(self.comm, None, None, finish)
