"""Layouts for numeric training tests: a model, a data-parallel size and TrainingConfig fields."""
from simcomm.parallel import TrainingConfig, build_layout


def numeric(model, dp: int = 1, **kw):
    """The layout of `kw` on tp x cp x pp x dp ranks; micro_batch_size defaults to one micro-batch per replica."""
    kw.setdefault("global_batch_size", 8)
    kw.setdefault("micro_batch_size", kw["global_batch_size"] // dp)
    world = dp * kw.get("tensor_model_parallel_size", 1) * kw.get("pipeline_model_parallel_size", 1) * \
        kw.get("context_parallel_size", 1)
    return build_layout(model, TrainingConfig(**kw), world)
