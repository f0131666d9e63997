"""Data-parallel timing: one policy per sharding scheme, sharing its description of what is sharded with the
numeric stores and the memory accounting."""
import numpy as np
import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.data_parallel import make_store
from simcomm.parallel.data_parallel.sharding import SCHEMES
from simcomm.parallel.data_parallel.timing import (POLICIES, DDPTiming, DistributedOptimizerTiming, Zero2Timing,
                                                   Zero3Timing)
from simcomm.parallel.model import memory
from simcomm.parallel.optim import AdamW

MODEL = model_preset("gpt3-1.3b", num_layers=4)


def test_one_policy_per_scheme_with_the_schemes_sharding():
    assert [POLICIES[z] for z in range(4)] == [DDPTiming, DistributedOptimizerTiming, Zero2Timing, Zero3Timing]
    for z, policy in POLICIES.items():
        assert policy.sharding is SCHEMES[z]
        assert build_layout(MODEL, TrainingConfig(global_batch_size=8, zero_stage=z), 8).sharding is SCHEMES[z]


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_memory_and_numeric_stores_read_the_same_sharding(zero):
    scheme = SCHEMES[zero]
    per = memory.bytes_per_parameter(2, 4, zero, 8)
    assert (per["optimizer_state"] < 12, per["gradients"] < 4, per["weights"] < 2) == \
        (scheme.optimizer_state, scheme.gradients, scheme.weights)
    store = make_store(zero, None, None, 1, 0, {"u": ["w"]}, {"w": np.zeros(4)}, {"w": _Spec()}, AdamW())
    assert store.sharding is scheme and store.scatter == (zero >= 1)


class _Spec:
    decay = True


@pytest.mark.parametrize("zero,phases", [(0, {"grad_reduce"}), (1, {"grad_reduce", "param_gather"}),
                                         (2, {"grad_reduce", "param_gather"}),
                                         (3, {"grad_reduce_scatter", "param_gather"})])
def test_each_policy_issues_its_schemes_collectives(zero, phases):
    cluster = build_cluster("hgx-h100")
    layout = build_layout(MODEL, TrainingConfig(global_batch_size=16, micro_batch_size=2, zero_stage=zero,
                                                memory_reserved=0), cluster.num_ranks)
    res = StepModel(layout, cluster).run()
    dp = {a.tags["phase"] for a in res.simulation.recorder.activities() if a.tags.get("axis") == "dp"}
    assert dp == phases | {"loss"} and res.breakdown["dp"] > 0  # and each micro-batch's loss (step_collectives)
