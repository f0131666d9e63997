"""Data parallelism: gradient buckets (buckets.py), DDP (ddp.py), ZeRO stages 1-3 / FSDP (zero.py), their
communication (reduce.py), all behind the parameter-store interface a GPTChunk uses (store.py)."""
from .ddp import DDPStore
from .zero import ZeroStore

MODES = ("ddp", "zero1", "zero2", "zero3")


def make_store(mode: str, *args, **kwargs):
    """A store for data_parallel mode 'ddp', 'zero1', 'zero2' or 'zero3' (arguments as DataParallelStore)."""
    if mode == "ddp":
        return DDPStore(*args, **kwargs)
    return ZeroStore(int(mode[-1]), *args, **kwargs)


__all__ = ["DDPStore", "MODES", "ZeroStore", "make_store"]
