"""Runs one pipeline rank's schedule (from schedules.py, the functions the cost model uses) on real chunks.

Each Action is a forward or backward of one microbatch through one model chunk; the runner receives its input
(activations from the previous virtual stage, or the output gradient from the next), runs the chunk, and sends the
result on. Every compute span and transfer is tagged stage (pipeline rank), microbatch, chunk and phase, so a
trace shows the schedule's order exactly.
"""
from __future__ import annotations

from .actions import FORWARD, Action, Placement

PHASES = {FORWARD: "forward", "B": "backward"}


class PipelineRunner:
    """One pipeline rank: its chunks (one per virtual stage it holds) and their parameter stores."""

    def __init__(self, comm, links, chunks, stores, activation_shape, like):
        self.comm, self.links = comm, links
        self.chunks, self.stores = chunks, stores
        self.p = links.p
        self.placement = Placement("loop", self.p, len(chunks))
        self.last_stage = self.placement.stages - 1
        self.activation_shape, self.like = activation_shape, like

    def run(self, actions: list[Action], microbatch) -> list:
        """Run the actions in order; microbatch(m) gives (ids, targets, loss_scale) of microbatch m. Returns the
        losses of the microbatches this rank finished (the last virtual stage only)."""
        last_backward = {}
        for i, a in enumerate(actions):
            if a.phase != FORWARD:
                last_backward[a.chunk] = i
        losses = []
        for i, a in enumerate(actions):
            stage = self.placement.stage(self.links.rank, a.chunk)
            chunk = self.chunks[a.chunk]
            with self.comm.tagged(stage=self.links.rank, microbatch=a.microbatch, chunk=a.chunk,
                                  phase=PHASES[a.phase]):
                if a.phase == FORWARD:
                    ids, targets, scale = microbatch(a.microbatch)
                    x = None if stage == 0 else self.links.recv_activation(self.activation_shape, self.like)
                    out = chunk.forward(a.microbatch, x=x, ids=ids if stage == 0 else None,
                                        targets=targets if stage == self.last_stage else None, loss_scale=scale)
                    if stage == self.last_stage:
                        losses.append(out)
                    else:
                        self.links.send_activation(out)
                else:
                    self.stores[a.chunk].last_microbatch = i == last_backward[a.chunk]
                    dout = None if stage == self.last_stage else \
                        self.links.recv_gradient(self.activation_shape, self.like)
                    dx = chunk.backward(a.microbatch, dout)
                    if stage > 0:
                        self.links.send_gradient(dx)
        self.links.wait_sends()
        return losses
