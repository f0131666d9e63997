"""What a pipeline schedule is made of: actions, overlapped pairs of actions, and where the model's stages sit.

Phases, named as torch.distributed.pipelining names them (its _ComputationType): F, a forward; B, a full backward
(the input and the weight gradients together); I, the input gradient alone, and W, the weight gradient alone: the
zero-bubble split of the backward (Qi et al. 2023 call these two B and W), which lets W fill the bubble. An
`Overlap` is DualPipe's overlapped pair (torch's OVERLAP_F_B): one micro-batch's forward and another's backward
run together on one rank, so that the communication of each hides behind the other's compute.

A `Placement` says which model stage each (pipeline rank, chunk) holds and where its activations go next:

- loop (Megatron's virtual pipeline; torch's "loop" style): chunk c of rank r is stage c p + r, so the last rank's
  chunk c feeds rank 0's chunk c + 1;
- v (ZB-V and DualPipeV; torch's "v" style): two chunks, rank r holds stages r and 2p - 1 - r, so the turn at the
  last rank stays on that rank (no transfer);
- dual (DualPipe): p stages, each held twice: chunk 0 of rank r is stage r for the micro-batches fed in at rank 0
  (the first half of them), chunk 1 is stage p - 1 - r for those fed in at rank p - 1 (the second half).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

FORWARD, BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT = "F", "B", "I", "W"
INPUT_GRADIENT = (BACKWARD, BACKWARD_INPUT)  # the passes that send a gradient to the previous stage
WEIGHT_GRADIENT = (BACKWARD, BACKWARD_WEIGHT)  # the passes after which a chunk's weight gradients exist
PHASE_NAMES = {FORWARD: "forward", BACKWARD: "backward", BACKWARD_INPUT: "backward_input",
               BACKWARD_WEIGHT: "backward_weight"}
OVERLAPPED = "F&B"


class Action(NamedTuple):
    """One pass of one microbatch through one model chunk on one pipeline rank."""

    phase: str  # F, B, I or W
    microbatch: int
    chunk: int = 0  # the rank's model chunk (its stage: Placement.stage); 0 without interleaving

    def __str__(self) -> str:
        return f"{self.phase}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


class Overlap(NamedTuple):
    """A forward and a backward (B) of other microbatches run together (DualPipe's overlapped chunks)."""

    forward: Action
    backward: Action

    @property
    def phase(self) -> str:
        return OVERLAPPED

    @property
    def parts(self) -> tuple[Action, Action]:
        return self.forward, self.backward

    def __str__(self) -> str:
        return f"{self.forward}&{self.backward}"


Schedule = list[list[Action | Overlap]]  # per pipeline rank, in execution order


def computations(acts: Iterable[Action | Overlap]) -> Iterator[Action]:
    """The actions in order, an overlapped pair as its forward then its backward."""
    for a in acts:
        if isinstance(a, Overlap):
            yield a.forward
            yield a.backward
        else:
            yield a


def has_pairs(sched: Schedule) -> bool:
    """Whether any rank's actions hold an overlapped pair (DualPipe's): their passes run at the pair's times."""
    return any(isinstance(a, Overlap) for acts in sched for a in acts)


@dataclass(frozen=True)
class Placement:
    """Which model stage each (pipeline rank, chunk) holds; see the module docstring."""

    style: str  # loop | v | dual
    pp: int
    chunks: int = 1

    @property
    def stages(self) -> int:
        """Model stages: the layers are split into this many runs."""
        return self.pp if self.style == "dual" else self.pp * self.chunks

    def stage(self, rank: int, chunk: int) -> int:
        if self.style == "v":
            return rank if chunk == 0 else 2 * self.pp - 1 - rank
        if self.style == "dual":
            return rank if chunk == 0 else self.pp - 1 - rank
        return chunk * self.pp + rank

    def next(self, rank: int, chunk: int) -> tuple[int, int] | None:
        """The (rank, chunk) a forward's output goes to; None after the last stage."""
        if self.style == "dual":
            r = rank + 1 if chunk == 0 else rank - 1
            return (r, chunk) if 0 <= r < self.pp else None
        return self.holder(self.stage(rank, chunk) + 1)

    def prev(self, rank: int, chunk: int) -> tuple[int, int] | None:
        """The (rank, chunk) a forward's input comes from (a backward's output goes to); None at the first stage."""
        if self.style == "dual":
            r = rank - 1 if chunk == 0 else rank + 1
            return (r, chunk) if 0 <= r < self.pp else None
        return self.holder(self.stage(rank, chunk) - 1)

    def holder(self, stage: int) -> tuple[int, int] | None:
        """(rank, chunk) of model stage `stage` (single-copy placements); None outside the model."""
        if not 0 <= stage < self.stages:
            return None
        if self.style == "v":
            return (stage, 0) if stage < self.pp else (2 * self.pp - 1 - stage, 1)
        return stage % self.pp, stage // self.pp

    def is_first(self, rank: int, chunk: int) -> bool:
        return self.prev(rank, chunk) is None

    def is_last(self, rank: int, chunk: int) -> bool:
        return self.next(rank, chunk) is None


__all__ = ["BACKWARD", "BACKWARD_INPUT", "BACKWARD_WEIGHT", "FORWARD", "INPUT_GRADIENT", "OVERLAPPED", "PHASE_NAMES",
           "WEIGHT_GRADIENT", "Action", "Overlap", "Placement", "Schedule", "computations",
           "has_pairs"]
