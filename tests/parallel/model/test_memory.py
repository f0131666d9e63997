"""Memory accounting reproduces the reference formulas: bytes per parameter by ZeRO stage, activations per layer
(Korthikanti et al. 2022 Table 2), and the schedules' in-flight activations."""
import pytest

from simcomm.errors import OutOfMemoryError
from simcomm.parallel.model import memory as mem
from simcomm.parallel.model.config import model_preset
from simcomm.parallel.model.layer import LayerShape
from simcomm.parallel import TrainingConfig, build_layout

GiB = 1 << 30


@pytest.mark.parametrize("d", [1, 8, 64])
def test_zero_bytes_per_parameter(d):
    def total(stage):  # ZeRO paper: fp16 params and grads, K = 12
        return sum(mem.bytes_per_parameter(2, 2, stage, d, fp32_grad_copy=False).values())
    assert total(0) == 16
    assert total(1) == pytest.approx(4 + 12 / d)
    assert total(2) == pytest.approx(2 + 14 / d)
    assert total(3) == pytest.approx(16 / d)


@pytest.mark.parametrize("d", [1, 16])
def test_megatron_distributed_optimizer_table(d):
    def total(p, g, stage):
        return sum(mem.bytes_per_parameter(p, g, stage, d).values())
    assert (total(2, 4, 0), total(2, 4, 1)) == (18, pytest.approx(6 + 12 / d))  # bf16 params, fp32 grads
    assert (total(2, 2, 0), total(2, 2, 1)) == (20, pytest.approx(4 + 16 / d))  # fp16 params and grads
    assert (total(4, 4, 0), total(4, 4, 1)) == (16, pytest.approx(8 + 8 / d))  # fp32


@pytest.mark.parametrize("t,sp,selective", [(1, False, False), (8, False, False), (8, True, False), (8, False, True),
                                            (8, True, True), (4, True, False)])
def test_activations_per_layer_reproduce_korthikanti(t, sp, selective):
    c = model_preset("gpt3-175b")  # GPT block with dropout; flash attention off: the s x s matrices are stored
    shape = LayerShape(c, t, 1, sp, micro_batch_size=2, flash=False)
    got = mem.layer_activation_bytes(shape, "selective" if selective else None)
    assert got == pytest.approx(mem.korthikanti_bytes_per_layer(2048, 2, 12288, 96, t, sp, selective), rel=1e-12)


def test_full_recompute_keeps_the_layer_input_and_cp_divides():
    c = model_preset("gpt3-175b")
    s, b, h = 2048, 1, 12288
    assert mem.layer_activation_bytes(LayerShape(c, 8, 1, False, 1), "full") == 2 * s * b * h
    assert mem.layer_activation_bytes(LayerShape(c, 8, 1, True, 1), "full") == 2 * s * b * h / 8
    one, two = (mem.layer_activation_bytes(LayerShape(model_preset("llama3-8b"), 2, cp, True, 1)) for cp in (1, 2))
    assert two == pytest.approx(one / 2)


def _first_stage_activations(pp, schedule="auto", v=None, m=16, layers=48):
    model = model_preset("gpt3-13b", num_layers=layers)
    cfg = TrainingConfig(global_batch_size=m, pipeline_model_parallel_size=pp, pipeline_schedule=schedule,
                         num_layers_per_virtual_pipeline_stage=v)
    layout = build_layout(model, cfg, pp)
    return mem.stage_memory(layout, 0, 80 * GiB), layout


def test_1f1b_holds_the_whole_model_once_gpipe_holds_m_microbatches():
    per_layer = mem.layer_activation_bytes(LayerShape(model_preset("gpt3-13b"), 1, 1, False, 1))
    for pp in (2, 4, 8):
        one_f, _ = _first_stage_activations(pp)
        assert one_f.in_flight == pp  # 1F1B: at most pp micro-batches
        assert one_f.categories["activations"] == pytest.approx(48 * per_layer, rel=0.01)  # independent of pp
        gp, _ = _first_stage_activations(pp, "gpipe")
        assert gp.in_flight == 16  # GPipe: every micro-batch
        assert gp.categories["activations"] == pytest.approx(16 * 48 / pp * per_layer, rel=0.01)


@pytest.mark.parametrize("pp,v", [(4, 2), (4, 3), (2, 4)])
def test_interleaving_multiplies_by_one_plus_p_minus_1_over_pv(pp, v):
    plain, _ = _first_stage_activations(pp)
    inter, _ = _first_stage_activations(pp, v=48 // pp // v)
    assert inter.categories["activations"] / plain.categories["activations"] == pytest.approx(
        1 + (pp - 1) / (pp * v), rel=0.01)


def test_out_of_memory_names_the_gpu_capacity_and_consumers():
    model = model_preset("llama3-70b")
    layout = build_layout(model, TrainingConfig(global_batch_size=8, tensor_model_parallel_size=8), 8)
    stages = [mem.stage_memory(layout, 0, 80 * GiB)]
    with pytest.raises(OutOfMemoryError) as info:
        mem.check_fits(stages, "H100-SXM5-80GB")
    msg = str(info.value)
    assert "GPU 0" in msg and "80 GiB" in msg and "H100-SXM5-80GB" in msg and "optimizer state" in msg
    assert info.value.needed > info.value.capacity == 80 * GiB
    assert list(info.value.consumers)[0] == "optimizer_state"  # the largest first



@pytest.mark.parametrize("first", [True, False])
def test_fp8_activations_do_not_depend_on_the_layout_asked_first(first):
    """A chunk's activations are cached by what they depend on, FP8 GEMMs included: the same layout with and
    without fp8_format gets its own bytes, whichever the process asked for first (micro-batch 3: a shape no other
    test caches)."""
    model = model_preset("llama3-8b")

    def layout(fp8: bool):
        return build_layout(model, TrainingConfig(global_batch_size=96, tensor_model_parallel_size=2,
                                                  pipeline_model_parallel_size=2, sequence_parallel=True,
                                                  micro_batch_size=3, fp8_format="hybrid" if fp8 else None), 64)

    got = {fp8: mem.stage_memory(layout(fp8), 0, 80e9, fp8).details["activations_per_microbatch"][0]
           for fp8 in (first, not first)}
    lay = layout(False)
    embedding_dropout = lay.layer_shape.sp_tokens * model.hidden_size if model.hidden_dropout > 0 else 0.0
    for fp8 in (True, False):
        per_layer = mem.layer_activation_bytes(lay.layer_shape, None, fp8)
        assert got[fp8] == pytest.approx(len(lay.layers_of(0, 0)) * per_layer + embedding_dropout)
    assert got[True] < got[False]
