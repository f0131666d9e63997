"""Size-only tensors run the same training programs without data: the same communication, the same compute and
the same simulated time as the run with data, so a layout can be timed at a scale numpy could never compute."""
import pytest

import simcomm
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.numeric_training import train

from .helpers import numeric

MODEL = TransformerConfig(num_layers=4, hidden_size=16, num_attention_heads=4, seq_length=8, padded_vocab_size=32,
                          num_query_groups=2)


def signature(timeline):
    """Every operation with what it was, who did it, its size and tags, in time order."""
    return [(a.rank, a.kind, a.start, a.end, a.nbytes, a.peer, tuple(sorted(a.tags.items())))
            for a in timeline if a.kind in ("compute", "collective", "p2p")]


@pytest.mark.parametrize("layout", [
    dict(tensor_model_parallel_size=2, sequence_parallel=True, context_parallel_size=2,
         pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2, micro_batch_size=4,
         pipeline_schedule="interleaved_1f1b", zero_stage=3, overlap_grad_reduce=True),
    dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, dp=2, micro_batch_size=2,
         zero_stage=1, bucket_size=300),
])
def test_size_only_run_equals_the_run_with_data(layout):
    lay = numeric(MODEL, train_iters=2, **layout)
    with_data = simcomm.spawn(train, args=(lay,), nprocs=lay.world_size)
    shapes = simcomm.spawn(train, args=(numeric(MODEL, train_iters=2, size_only=True, **layout),),
                           nprocs=lay.world_size)
    assert signature(shapes.timeline) == signature(with_data.timeline)
    assert shapes.elapsed == with_data.elapsed > 0
    assert all(r["params"] is None and all(x is None for x in r["loss"]) for r in shapes.results)
    assert [r["state_bytes"] for r in shapes.results] == [r["state_bytes"] for r in with_data.results]


def test_a_large_model_runs_size_only():
    """GPT-3 1.3B's shapes (no array of them is ever allocated) on 8 GPUs: the step takes simulated
    milliseconds, and the per-rank state follows from the parameter count."""
    from simcomm.parallel.model.config import model_preset
    lay = numeric(model_preset("gpt3-1.3b"), tensor_model_parallel_size=2, pipeline_model_parallel_size=2, dp=2,
                  use_distributed_optimizer=True, global_batch_size=4, micro_batch_size=1, sequence_parallel=True,
                  size_only=True, params_dtype="bfloat16")
    res = simcomm.spawn(train, args=(lay,), nprocs=8, detail="steps")
    assert 1e-3 < res.elapsed < 1.0
    # bytes this rank keeps: its quarter of the model (TP x PP) in bf16, gradients whole, AdamW moments sharded
    held = res.results[0]["state_bytes"]
    assert held["grads"] == held["params"] and held["optimizer"] == pytest.approx(held["params"], rel=1e-3)
    assert 0.2e9 < held["params"] / 2 < 0.5e9  # about 1.3e9 / 4 parameters (first stage: plus the embedding)
