"""A numeric pipeline run does, on every stage, the forwards and backwards schedules.py defines, in that order,
and its transfers carry the same tags."""
import pytest

import simcomm
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.numeric_training import train
from simcomm.parallel.pipeline_parallel.schedules import Action, schedule

from ..helpers import numeric

MODEL = TransformerConfig(num_layers=8, hidden_size=16, num_attention_heads=2, seq_length=4, padded_vocab_size=16)


def recorded_order(timeline, rank):
    """The (phase, microbatch, chunk) sequence of a rank's compute spans, consecutive repeats merged (one pass
    may be charged as several spans, split at its communication)."""
    seq = []
    for a in timeline:
        if a.rank == rank and a.kind == "compute" and a.tags.get("phase") in ("forward", "backward"):
            act = Action("F" if a.tags["phase"] == "forward" else "B", a.tags["microbatch"], a.tags["chunk"])
            if not seq or seq[-1] != act:
                seq.append(act)
    return seq


@pytest.mark.parametrize("name,pp,chunks,microbatches", [
    ("gpipe", 4, 1, 4), ("1f1b", 4, 1, 8), ("1f1b", 2, 1, 3), ("interleaved_1f1b", 2, 2, 4),
    ("interleaved_1f1b", 4, 2, 8), ("interleaved_1f1b", 2, 4, 6)])
def test_trace_follows_the_schedule(name, pp, chunks, microbatches):
    lay = numeric(MODEL, pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=chunks,
                  pipeline_schedule=name, global_batch_size=microbatches, micro_batch_size=1)
    res = simcomm.spawn(train, args=(lay,), nprocs=pp)
    expected = schedule(name, pp, microbatches, chunks)
    for rank in range(pp):
        assert recorded_order(res.timeline, rank) == expected[rank]
    # every activation and gradient transfer is tagged with the pass that sent it
    p2p = [a for a in res.timeline if a.kind == "p2p"]
    assert len(p2p) == 2 * microbatches * (pp * chunks - 1)
    for a in p2p:
        assert a.tags["axis"] == "pp" and a.tags["stage"] == a.rank
        assert (a.peer - a.rank) % pp == (1 if a.tags["phase"] == "forward" else pp - 1)
        assert a.nbytes == 4 * 1 * 16 * 8  # [seq, microbatch, hidden] float64


def test_interleaving_shortens_the_simulated_step_as_the_schedule_predicts():
    """A compute-bound size-only run (4 stages of a wide model on H100s): interleaving shortens the step, by the
    ratio schedules.timeline predicts for forward 1, backward 2 (within 5%: transfers and the gradient sync)."""
    from simcomm.parallel.pipeline_parallel.timeline import makespan, timeline
    wide = MODEL.with_overrides(hidden_size=4096, num_attention_heads=32, seq_length=2048, padded_vocab_size=32768)
    times, predicted = {}, {}
    for name, chunks in (("1f1b", 1), ("interleaved_1f1b", 2)):
        lay = numeric(wide, pipeline_model_parallel_size=4, virtual_pipeline_model_parallel_size=chunks,
                      pipeline_schedule=name, global_batch_size=8, micro_batch_size=1, size_only=True,
                      params_dtype="bfloat16")
        times[name] = simcomm.spawn(train, args=(lay,), nprocs=4).elapsed
        predicted[name] = makespan(timeline(schedule(name, 4, 8, chunks), lambda _r, a: (1.0 if a.phase == "F"
                                                                                          else 2.0) / chunks))
    assert times["interleaved_1f1b"] < times["1f1b"]
    ratio = times["interleaved_1f1b"] / times["1f1b"]
    assert ratio == pytest.approx(predicted["interleaved_1f1b"] / predicted["1f1b"], rel=0.05)
