"""Data parallelism, numeric and timed side by side: what each scheme shards (sharding.py); numeric training's
gradient buckets (buckets.py), parameter stores (store.py: the interface a GPTChunk uses; ddp.py, zero.py for
ZeRO stages 1-3 / FSDP) and their communication (reduce.py); the step model's policy per scheme (timing.py)."""


def make_store(zero_stage: int, *args, **kwargs):
    """A numeric parameter store for ZeRO stage 0 (DDP), 1 (the distributed optimizer), 2 or 3 (FSDP); arguments
    as DataParallelStore. (Imported here, not at the package's top: the step model reads sharding.py and timing.py
    without numeric training's modules.)"""
    from .ddp import DDPStore
    from .zero import ZeroStore
    if zero_stage == 0:
        return DDPStore(*args, **kwargs)
    return ZeroStore(zero_stage, *args, **kwargs)


__all__ = ["make_store"]
