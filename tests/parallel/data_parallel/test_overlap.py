"""overlap_grad_reduce overlaps in simulated time: a bucket's reduction starts once the backward compute that made
its gradients has run, while later backward compute is still running (as a DDP bucket's NCCL kernel waits only
on the stream work enqueued before it), not when the whole backward has ended."""
import pytest

import simcomm
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.numeric_training import train

from ..helpers import numeric

# wide enough that each layer is a bucket of its own and its backward takes visible time
WIDE = TransformerConfig(num_layers=4, hidden_size=512, num_attention_heads=8, seq_length=256, padded_vocab_size=512)
STAGES = {"ddp": 0, "zero2": 2}


def spans(mode: str, overlap: bool):
    lay = numeric(WIDE, dp=2, zero_stage=STAGES[mode], global_batch_size=2, overlap_grad_reduce=overlap,
                  bucket_size=500_000, size_only=True)
    res = simcomm.spawn(train, args=(lay,), nprocs=lay.world_size)
    out = []
    for rank in range(lay.world_size):
        mine = [a for a in res.timeline if a.rank == rank]
        backward = [a for a in mine if a.kind == "compute" and a.tags.get("phase") == "backward"]
        # the first bucket issued (backward makes the last layers' gradients first)
        first = min((a for a in mine if a.kind == "collective" and a.tags.get("bucket") is not None),
                    key=lambda a: a.start)
        out.append((backward, first))
    return out


@pytest.mark.parametrize("mode,collective", [("ddp", "all_reduce"), ("zero2", "reduce_scatter")])
def test_the_first_bucket_is_reduced_during_backward(mode, collective):
    """And the buckets, all on the data-parallel group, are reduced one after another in the order issued, as on
    the communicator's NCCL stream."""
    for backward, first in spans(mode, overlap=True):
        assert first.tags["collective"] == collective and first.tags["phase"] == "backward"
        assert len(backward) > 2
        # after the compute that produced bucket 0's gradients, before the rest of backward has run
        assert backward[0].end <= first.start < backward[-1].end
        assert sum(a.start >= first.start for a in backward) >= 2  # backward compute still to run meanwhile
    res_buckets = [a for a in simcomm_timeline(mode) if a.rank == 0 and a.kind == "collective"
                   and a.tags.get("bucket") is not None]
    assert len(res_buckets) > 3
    for earlier, later in zip(res_buckets, res_buckets[1:]):
        assert later.start >= earlier.end  # one at a time on the group's stream


def simcomm_timeline(mode: str):
    lay = numeric(WIDE, dp=2, zero_stage=STAGES[mode], global_batch_size=2, overlap_grad_reduce=True,
                  bucket_size=500_000, size_only=True)
    return sorted(simcomm.spawn(train, args=(lay,), nprocs=lay.world_size).timeline, key=lambda a: a.start)


def test_without_overlap_ddp_reduces_after_the_whole_backward():
    for backward, first in spans("ddp", overlap=False):
        assert first.start >= backward[-1].end


def test_without_overlap_zero2_blocks_backward_while_it_reduces():
    """ZeRO-2 reduce-scatters each bucket as soon as it is final, but waits for it before going on."""
    for backward, first in spans("zero2", overlap=False):
        assert backward[0].end <= first.start < backward[-1].end
        assert all(a.end <= first.start or a.start >= first.end for a in backward)
