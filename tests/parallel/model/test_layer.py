"""The one description of a transformer layer: the step model's kernels, the FLOPs formulas and the saved
activations derive from it, and the numeric GPT's counted matrix products equal its formula."""
import pytest

import simcomm
from simcomm.parallel import TrainingConfig, build_layout
from simcomm.parallel.model import flops as f
from simcomm.parallel.model import programs
from simcomm.parallel.model.config import TransformerConfig, model_preset
from simcomm.parallel.model.layer import (CoreAttention, LayerShape, Linear, Pointwise, decoder_layer,
                                          forward_flops_per_token, saved_tensors)
from simcomm.parallel.numeric_training import train


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-8b"])
@pytest.mark.parametrize("tp,cp,sp,flash", [(1, 1, False, True), (8, 2, True, True), (4, 1, False, False)])
def test_programs_are_the_descriptions_operations(name, tp, cp, sp, flash):
    shape = LayerShape(model_preset(name), tp, cp, sp, 1, flash)
    ops = decoder_layer(shape)
    fwd = {k.name: k for st in programs.layer_forward(shape) for k in st.compute}
    bwd = {k.name: k for st in programs.layer_backward(shape) for k in st.compute}
    for op in ops:
        if isinstance(op, Linear):
            assert fwd[op.name].shape == (op.m, op.n, op.k) and fwd[op.name].flops == op.flops
            assert bwd[op.name + ".dgrad"].flops + bwd[op.name + ".wgrad"].flops == 2 * op.flops
        elif isinstance(op, Pointwise):
            assert fwd[op.name].shape == (op.forward_bytes, op.op_class)
            assert bwd[op.name + ".backward"].shape == (op.backward_bytes, op.op_class)
        else:
            assert sum(k.flops for k in fwd.values() if k.kind != programs.MEMORY and k.name not in
                       {o.name for o in ops if isinstance(o, Linear)}) == op.flops
    kept = {n for op in ops for n, _ in op.saves}
    assert set(saved_tensors(shape)) == kept


def test_flops_per_token_are_the_layers_products():
    c = model_preset("llama3-8b")
    per = forward_flops_per_token(c)
    h, q, kv, ffn = c.hidden_size, c.query_projection_size, c.kv_projection_size, c.ffn_hidden_size
    assert per == {"qkv": 2.0 * h * (q + 2 * kv), "core_attention": 4.0 * c.seq_length * q, "proj": 2.0 * q * h,
                   "mlp": 2.0 * h * ffn * 3}
    assert forward_flops_per_token(c, causal=True)["core_attention"] == per["core_attention"] / 2
    att = next(op for op in decoder_layer(LayerShape(c, 1, 1, False, 1)) if isinstance(op, CoreAttention))
    assert att.flops == per["core_attention"] * c.seq_length


MODEL = TransformerConfig(num_layers=4, hidden_size=32, num_attention_heads=4, seq_length=16, padded_vocab_size=64,
                          num_query_groups=2)


@pytest.mark.parametrize("kw,world", [({}, 1), (dict(tensor_model_parallel_size=2, sequence_parallel=True,
                                                     context_parallel_size=2, pipeline_model_parallel_size=2), 16)])
def test_numeric_trainings_counted_flops_are_the_formula(kw, world):
    """Every matrix product the numeric GPT runs, summed over its ranks, is Megatron's
    num_floating_point_operations, plus the scores its attention backward recomputes (as flash attention's does):
    half a forward of core attention."""
    layout = build_layout(MODEL, TrainingConfig(global_batch_size=4, micro_batch_size=1, train_iters=2,
                                                size_only=True, params_dtype="bf16", **kw), world)
    res = simcomm.spawn(train, args=(layout,), nprocs=world)
    tokens = 4 * MODEL.seq_length * 2
    recomputed_scores = 0.5 * MODEL.num_layers * forward_flops_per_token(MODEL)["core_attention"]
    expected = (f.megatron_flops_per_token(MODEL) + recomputed_scores) * tokens
    assert sum(r["flops"] for r in res.results) == pytest.approx(expected, rel=1e-12)
