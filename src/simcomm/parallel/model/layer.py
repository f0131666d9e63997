"""One decoder layer on one GPU for one micro-batch: its shape (what every kernel, FLOP count and saved tensor of
the layer depends on)."""
from __future__ import annotations

from dataclasses import dataclass

from .config import TransformerConfig


@dataclass(frozen=True)
class LayerShape:
    """Everything the kernels depend on (hashable: programs are cached by it)."""

    model: TransformerConfig
    tp: int
    cp: int
    sp: bool
    micro_batch_size: int
    flash: bool = True
    tp_comm_overlap: bool = False
    elem: int = 2  # activation bytes

    @property
    def tokens(self) -> int:
        """Tokens each GPU holds between the TP collectives: b s / cp."""
        return self.micro_batch_size * self.model.seq_length // self.cp

    @property
    def sp_tokens(self) -> int:
        """Tokens of the norms, dropouts and residual adds: T / t with sequence parallelism."""
        return self.tokens // self.tp if self.sp else self.tokens
