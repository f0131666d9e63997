"""Data parallelism: gradient buckets (buckets.py), DDP (ddp.py), ZeRO stages 1-3 / FSDP (zero.py), their
communication (reduce.py), all behind the parameter-store interface a GPTChunk uses (store.py)."""
from .ddp import DDPStore
from .zero import ZeroStore



def make_store(zero_stage: int, *args, **kwargs):
    """A store for ZeRO stage 0 (DDP), 1 (the distributed optimizer), 2 or 3 (FSDP); arguments as
    DataParallelStore."""
    if zero_stage == 0:
        return DDPStore(*args, **kwargs)
    return ZeroStore(zero_stage, *args, **kwargs)


__all__ = ["DDPStore", "ZeroStore", "make_store"]
