"""Megatron-Core's recompute_modules under selective recomputation, and the FP8 copies Transformer Engine keeps of
GEMM inputs: what each drops from the saved activations, what it reruns, what it costs."""
import pytest

from simcomm.hardware import build_cluster
from simcomm.parallel import ConfigError, StepModel, TrainingConfig, build_layout, model_preset
from simcomm.parallel.model import programs
from simcomm.parallel.model.flops import recompute_flops_per_token
from simcomm.parallel.model.layer import RECOMPUTED, saved_tensors

DSV3 = model_preset("deepseek-v3", num_layers=4, moe_layer_freq=[0, 1, 1, 1])


def layout(modules=None, model=DSV3, **kw):
    cfg = TrainingConfig(global_batch_size=64, micro_batch_size=1, bf16=True, expert_model_parallel_size=8,
                         moe_grouped_gemm=True, recompute_granularity="selective", recompute_modules=modules, **kw)
    return build_layout(model, cfg, 8)


def test_the_default_module_is_core_attention():
    a, b = layout(), layout(["core_attn"])
    assert a.layer_shape == b.layer_shape
    run = [StepModel(x, build_cluster("hgx-h100"), check_memory=False).run() for x in (a, b)]
    assert run[0].step_time == run[1].step_time and run[0].peak_memory == run[1].peak_memory


@pytest.mark.parametrize("module", ["layernorm", "mla_up_proj", "moe_act"])
def test_each_module_drops_its_tensors_and_reruns_its_operations(module):
    lay = layout(["core_attn", module])
    shape = lay.moe_layer_shape
    base = saved_tensors(layout().moe_layer_shape, "selective")
    kept = saved_tensors(shape, "selective")
    dropped = set(base) - set(kept)
    assert dropped and dropped <= set(RECOMPUTED[module])
    names = {k.name for st in programs.selective_recompute(shape) for k in st.compute}
    assert "core_attention" in names
    want = {"layernorm": {"input_norm", "pre_mlp_norm"}, "mla_up_proj": {"q_up", "kv_up", "rope"},
            "moe_act": {"moe.swiglu"}}[module]
    assert want <= names


def test_mla_up_projections_add_their_flops_to_the_hardware_count():
    extra = recompute_flops_per_token(DSV3, "selective", modules=("core_attn", "mla_up_proj")) - \
        recompute_flops_per_token(DSV3, "selective")
    c = DSV3
    per_layer = 2 * c.q_lora_rank * c.num_attention_heads * (c.qk_head_dim + c.qk_pos_emb_head_dim) + \
        2 * c.kv_lora_rank * c.num_attention_heads * (c.qk_head_dim + c.v_head_dim)
    assert extra == pytest.approx(c.num_layers * per_layer)


@pytest.mark.parametrize("kw,field", [
    (dict(recompute_modules=["mlp"]), "recompute_modules"),
    (dict(recompute_modules=["layernorm"], recompute_granularity="full"), "recompute_modules"),
])
def test_bad_recompute_modules_are_refused(kw, field):
    with pytest.raises(ConfigError) as err:
        TrainingConfig(global_batch_size=8, **{"recompute_granularity": "selective", **kw})
    assert err.value.field == field


def test_mla_up_proj_needs_multi_latent_attention():
    with pytest.raises(ConfigError) as err:
        layout(["mla_up_proj"], model=model_preset("mixtral-8x7b", num_layers=2))
    assert err.value.field == "recompute_modules"


def test_fp8_gemms_keep_one_byte_copies_of_their_inputs():
    """Transformer Engine keeps the FP8 cast of a GEMM's input for its weight gradient; the router stays 16-bit,
    and what no GEMM reads (the activation's input, attention's output) too."""
    shape = layout().moe_layer_shape
    bf16, fp8 = saved_tensors(shape), saved_tensors(shape, fp8=True)
    for name in ("moe_fc1_input", "moe_fc2_input", "q_down_input", "kv_up_input", "shared_fc1_input"):
        assert fp8[name] == bf16[name] / 2
    for name in ("router_input", "moe_activation_input", "attention_output", "query_key_value"):
        assert fp8[name] == bf16[name]
