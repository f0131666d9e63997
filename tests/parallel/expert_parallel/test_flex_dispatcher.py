"""The flex dispatcher (DeepEP): node-limited routing's bytes over IB and NVLink, FP8 dispatch, and what they do to
a step; the switches that refuse what is not modelled."""
from math import comb

import numpy as np
import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import ConfigError, StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.model.moe.deepep import FP8_ROW_BYTES_PER_ELEMENT, DeepEPExchange, deepep_rows

DSV3 = model_preset("deepseek-v3", num_layers=4, moe_layer_freq=[0, 1, 1, 1])


def test_node_limited_routing_reaches_at_most_group_topk_nodes():
    """DeepSeek-V3: 8 groups = the 8 nodes of EP 64, each token to at most 4; without group-limited routing the
    expected distinct nodes of k experts chosen uniformly."""
    x = DeepEPExchange(4096, 7168.0, 14336.0, 256, 8, 8, 4)
    assert x.nodes_per_token(8) == 4.0 and x.nodes_per_token(1) == 1.0
    free = DeepEPExchange(4096, 7168.0, 14336.0, 256, 8)
    assert free.nodes_per_token(8) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)))
    assert 5.0 < free.nodes_per_token(8) < 5.5  # about 8 (1 - (7/8)^8)


def test_balanced_deepep_rows_equal_the_formula():
    """T tokens per GPU, M nodes each, N nodes of G GPUs: T M / N tokens over IB to each node's same-index GPU,
    T k / G rows over NVLink to each GPU of the node."""
    T, k, M, N, G = 4096, 8, 4.0, 8, 8
    rows_to = np.full(N * G, T * k / (N * G))
    rdma, nvlink = deepep_rows(T, M, rows_to, G)
    assert np.allclose(rdma, T * M / N) and np.allclose(nvlink, T * k / G)
    hot = rows_to.copy()
    hot[:G] *= 3  # node 0's experts get 3x: more tokens cross to it, capped at every token
    rdma, _ = deepep_rows(T, M, hot, G)
    assert rdma[0] == T and rdma[1] < T * M / N


def _template(dispatcher, fp8=False, phase="F", **kw):
    cfg = TrainingConfig(global_batch_size=128, micro_batch_size=1, bf16=True, fp8_format="e4m3",
                         expert_model_parallel_size=64, moe_grouped_gemm=True, moe_token_dispatcher_type=dispatcher,
                         moe_dispatch_fp8=fp8, **kw)
    sim = StepModel(build_layout(DSV3, cfg, 64), build_cluster("hgx-h800", nodes=8), check_memory=False)
    return next(x for x in sim.build_passes()[(0, 0, phase)].parts if x.layer == 3).template


def _exchanges(tpl):
    return {s.name: s for s in tpl.segments if s.stream == "ep" and "tokens_per_expert" not in s.name}


@pytest.mark.parametrize("fp8", [False, True])
def test_deepep_bytes_equal_the_formula(fp8):
    """Per GPU per exchange: (N - 1) T M / N rows over IB and (G - 1) T k / G over NVLink, rows of h elements:
    FP8 with a scale per 128 in the dispatch-shaped direction where moe_dispatch_fp8, BF16 in the combine's."""
    T, k, h, M, N, G = 4096, 8, 7168, 4, 8, 8
    rows = (N - 1) * T * M / N + (G - 1) * T * k / G
    fwd, bwd = _exchanges(_template("flex", fp8)), _exchanges(_template("flex", fp8, phase="B"))
    dispatch_row = h * (FP8_ROW_BYTES_PER_ELEMENT if fp8 else 2)
    assert fwd["moe.dispatch"].nbytes == pytest.approx(rows * dispatch_row, rel=1e-6)
    assert bwd["moe.combine.backward"].nbytes == pytest.approx(rows * dispatch_row, rel=1e-6)
    assert fwd["moe.combine"].nbytes == pytest.approx(rows * h * 2, rel=1e-6)
    assert bwd["moe.dispatch.backward"].nbytes == pytest.approx(rows * h * 2, rel=1e-6)


def test_deepep_crosses_ib_less_than_the_alltoall_dispatcher():
    """Each token crosses IB to 4 nodes, not to its 8 experts' GPUs: the exchanges take about half as long (IB
    bound), less again with FP8 dispatch; the combine stays BF16."""
    a2a, flex, fp8 = (_exchanges(_template(d, f)) for d, f in (("alltoall", False), ("flex", False),
                                                                ("flex", True)))
    span = {name: {k: s.end - s.start for k, s in got.items()} for name, got in
            (("a2a", a2a), ("flex", flex), ("fp8", fp8))}
    assert span["flex"]["moe.dispatch"] < 0.6 * span["a2a"]["moe.dispatch"]
    assert span["fp8"]["moe.dispatch"] < 0.6 * span["flex"]["moe.dispatch"]
    assert span["fp8"]["moe.combine"] == pytest.approx(span["flex"]["moe.combine"], rel=1e-9)


@pytest.mark.parametrize("kw,field", [
    (dict(moe_token_dispatcher_type="allgather"), "moe_token_dispatcher_type"),
    (dict(moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="hybridep"), "moe_flex_dispatcher_backend"),
    (dict(moe_dispatch_fp8=True), "moe_dispatch_fp8"),
    (dict(overlap_moe_expert_parallel_comm=True), "overlap_moe_expert_parallel_comm"),
])
def test_what_is_not_modelled_is_refused_naming_the_field(kw, field):
    cfg = TrainingConfig(global_batch_size=128, micro_batch_size=1, bf16=True, expert_model_parallel_size=64,
                         pipeline_model_parallel_size=1, **kw)
    with pytest.raises(ConfigError) as err:
        build_layout(DSV3, cfg, 64)
    assert err.value.field == field


@pytest.mark.parametrize("dispatcher", ["alltoall", "flex"])
def test_the_shared_expert_overlap_hides_the_shared_expert_behind_the_exchanges(dispatcher):
    """moe_shared_expert_overlap: the shared expert's forward runs beside the dispatch and combine (longer than
    it here), so the layer's forward is shorter by its kernels' time and its exposed exchanges by as much; the
    same kernels run; the backward is unchanged."""
    def layer(on, phase="F"):
        cfg = TrainingConfig(global_batch_size=128, micro_batch_size=1, bf16=True, expert_model_parallel_size=64,
                             moe_grouped_gemm=True, moe_token_dispatcher_type=dispatcher,
                             moe_shared_expert_overlap=on)
        sim = StepModel(build_layout(DSV3, cfg, 64), build_cluster("hgx-h800", nodes=8), check_memory=False,
                        interference=False)
        return next(x for x in sim.build_passes()[(0, 0, phase)].parts if x.layer == 3).template
    off, on = layer(False), layer(True)
    shared = sum(s.end - s.start for s in off.segments if s.name.startswith("shared_expert."))
    assert shared > 0 and on.flops == off.flops and on.compute == pytest.approx(off.compute, rel=1e-12)
    assert off.duration - on.duration == pytest.approx(shared, rel=1e-6)
    assert off.exposed["ep"] - on.exposed["ep"] == pytest.approx(shared, rel=1e-6)
    assert layer(True, "B").duration == layer(False, "B").duration
