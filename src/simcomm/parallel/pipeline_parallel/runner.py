"""Runs one pipeline rank's schedule (from schedules.py, the lists the cost model uses) on real chunks.

Each Action is a pass of one microbatch through one model chunk: a forward (F), a whole backward (B), or the
backward split in two, its input gradient (I) and later its weight gradient (W); DualPipe's overlapped pair runs
its forward, then its backward. The runner receives a pass's input (activations from the previous stage, or the
output gradient from the next), runs the chunk, and sends the result on, to wherever the schedule's placement puts
the neighbouring stage (the V's turn stays on the rank: handed over, not sent). Every compute span and transfer is
tagged stage (pipeline rank), microbatch, chunk and phase, so a trace shows the schedule's order exactly.
"""
from __future__ import annotations

from .actions import BACKWARD, BACKWARD_WEIGHT, FORWARD, PHASE_NAMES, WEIGHT_GRADIENT, Action, Placement, computations
from .p2p import ACTIVATION_TAG, GRADIENT_TAG


class PipelineRunner:
    """One pipeline rank: its chunks (one per model stage it holds) and their parameter stores."""

    def __init__(self, comm, links, chunks, stores, activation_shape, like, placement: Placement | None = None):
        self.comm, self.links = comm, links
        self.chunks, self.stores = chunks, stores
        self.placement = placement or Placement("loop", links.p, len(chunks))
        self.activation_shape, self.like = activation_shape, like
        self._handed: dict = {}  # (tag, microbatch, chunk) -> what a chunk on this rank passed to another

    def run(self, actions, microbatch) -> list:
        """Run the actions in order; microbatch(m) gives (ids, targets, loss_scale) of microbatch m. Returns the
        losses of the microbatches this rank finished (those through the last model stage)."""
        flat = list(computations(actions))
        last_weight = {a.chunk: i for i, a in enumerate(flat) if a.phase in WEIGHT_GRADIENT}
        losses = []
        for i, a in enumerate(flat):
            with self.comm.tagged(stage=self.links.rank, microbatch=a.microbatch, chunk=a.chunk,
                                  phase=PHASE_NAMES[a.phase]):
                if a.phase in WEIGHT_GRADIENT:
                    self.stores[a.chunk].last_microbatch = i == last_weight[a.chunk]
                out = self._pass(a, microbatch)
                if out is not None:
                    losses.append(out)
        self.links.wait_sends()
        return losses

    def _pass(self, a: Action, microbatch):
        here, chunk = self.links.rank, self.chunks[a.chunk]
        prev, nxt = self.placement.prev(here, a.chunk), self.placement.next(here, a.chunk)
        if a.phase == FORWARD:
            ids, targets, scale = microbatch(a.microbatch)
            x = None if prev is None else self._receive(ACTIVATION_TAG, a, prev)
            out = chunk.forward(a.microbatch, x=x, ids=ids if prev is None else None,
                                targets=targets if nxt is None else None, loss_scale=scale)
            if nxt is None:
                return out
            self._send(ACTIVATION_TAG, out, a.microbatch, nxt)
        elif a.phase == BACKWARD_WEIGHT:
            chunk.backward_weight(a.microbatch)
        else:
            dout = None if nxt is None else self._receive(GRADIENT_TAG, a, nxt)
            dx = chunk.backward(a.microbatch, dout) if a.phase == BACKWARD else \
                chunk.backward_input(a.microbatch, dout)
            if prev is not None:
                self._send(GRADIENT_TAG, dx, a.microbatch, prev)
        return None

    def _send(self, tag, x, microbatch, to) -> None:
        if to[0] == self.links.rank:
            self._handed[(tag, microbatch, to[1])] = x
        else:
            self.links.send(x, to[0], tag)

    def _receive(self, tag, a: Action, source):
        if source[0] == self.links.rank:
            return self._handed.pop((tag, a.microbatch, a.chunk))
        return self.links.recv(self.activation_shape, self.like, source[0], tag)


__all__ = ["PipelineRunner"]
