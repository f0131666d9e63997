"""Layer templates: what sharing adds to the kernels is measured against their seconds alone, which a run without
sharing adds up (so the template need not run its program twice); a program under two names is simulated once."""
import dataclasses

import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import TrainingConfig, build_layout, model_preset
from simcomm.parallel.layer_timing import PROGRAMS, TWINS, TemplateCache, TemplateRunner
from simcomm.parallel.step_cost import StepModel

SMALL = model_preset("gpt3-13b", num_layers=4, padded_vocab_size=256)


def _sim(**kw):
    cluster = build_cluster("hgx-h100", nodes=1)
    cfg = TrainingConfig(global_batch_size=8, tensor_model_parallel_size=4, sequence_parallel=True, **kw)
    return StepModel(build_layout(SMALL, cfg, cluster.num_ranks), cluster)


@pytest.mark.parametrize("name", ["layer.forward", "layer.backward"])
def test_interference_is_the_kernels_time_beyond_a_run_without_sharing(name):
    sim = _sim(tp_comm_overlap=True)  # Transformer Engine's userbuffers: TP communication beside the GEMMs
    stage = sim.dims.ranks(pp=0, dp=0)
    program = PROGRAMS[name](sim.shape)
    assert any(st.comm and st.compute for st in program)
    shared = TemplateRunner(sim.cluster, sim.cm, stage, "bfloat16").run(name, program, True)
    alone = TemplateRunner(sim.cluster, sim.cm, stage, "bfloat16", interference=False).run(name, program, True)
    assert alone.interference == 0.0
    assert shared.compute == alone.compute  # bit for bit: the same seconds added in the same order
    assert shared.interference > 0.0  # the communication beside the kernels slows them
    assert shared.duration > alone.duration


def _fields(tpl) -> dict:
    out = {f.name: getattr(tpl, f.name) for f in dataclasses.fields(tpl) if f.name not in ("name", "mix")}
    out["mix"] = (tpl.mix.kernels, tpl.mix.weights.tolist()) if tpl.mix is not None else None
    return out


def test_a_recomputation_is_the_forward_simulated_once_and_renamed():
    assert TWINS["layer.recompute"] == "layer.forward" and TWINS["layer.selective"] == "layer.selective"
    sim = _sim()
    stage = sim.dims.ranks(pp=0, dp=0)
    cache = TemplateCache(sim.cluster)
    got = {name: cache.get(sim.cm, stage, sim.shape, "bfloat16", False, name)
           for name in ("layer.recompute", "layer.forward")}
    assert got["layer.recompute"].name == "layer.recompute" and got["layer.forward"].name == "layer.forward"
    own = TemplateRunner(sim.cluster, sim.cm, stage, "bfloat16").run(
        "layer.recompute", PROGRAMS["layer.recompute"](sim.shape))
    assert _fields(got["layer.recompute"]) == _fields(own) == _fields(got["layer.forward"])
