"""Optional compute time: torch's FLOP formulas (torch.utils.flop_counter) count each rank's matmuls and
convolutions; the count is charged on the simulated GPU at its compute rate at the rank's next synchronising call
(a collective, p2p, sleep, clock read, torch.cuda.synchronize, Work.wait, or the end of the rank), as a GPU's
queued kernels finish before communication that depends on them.

`FlopCounter` is a TorchDispatchMode (thread-local in torch), entered in rank threads only.
"""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from .context import RankContext, current_context


class FlopCounter(TorchDispatchMode):
    """Adds every counted op's FLOPs to the calling rank's pending compute."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count = flop_registry.get(func._overloadpacket)
        if count is not None:
            ctx = current_context()
            if ctx is not None:
                ctx.pending_flops += count(*args, **kwargs, out_val=out)
        return out


def flush(ctx: RankContext | None = None) -> None:
    """Charge the calling rank's pending FLOPs on its simulated device now (simulated time passes)."""
    ctx = ctx or current_context()
    if ctx is None or ctx.pending_flops <= 0:
        return
    from ...distributed import clock
    flops, ctx.pending_flops = ctx.pending_flops, 0.0
    rate = ctx.world.flop_rate
    clock.compute(seconds=flops / rate, label=f"torch compute ({flops:.3g} FLOP)")
