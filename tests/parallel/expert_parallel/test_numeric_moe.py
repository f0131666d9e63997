"""Expert parallelism trains the numeric MoE GPT as serial training does.

Layouts fold the expert grid (etp x ep x edp x pp) onto the attention grid (tp x cp x dp x pp) as Megatron-Core
does; the routed rows cross the EP group in all_to_all with the real (uneven) splits, and the experts' gradients
are reduced over their expert-data-parallel group.

The reference is serial training with its sums cut as the layout cuts the batch (train_serial's micro_batch_size and
replicas): the load-balancing loss is a function of each micro-batch's routing (Megatron computes it per
micro-batch, its counts summed over the TP x CP ranks that share the micro-batch's sequence), so a whole-batch
reference would be another objective. Only the order of floating-point sums differs (rows reach their experts in
another order, a matmul cut over TP or ETP ranks), so on float64 the weights after three AdamW steps must be within
1e-11 of each parameter's largest entry and the losses within 1e-12 relative.
"""
import numpy as np
import pytest

from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.model.gpt import WORD, init_params, param_specs
from simcomm.parallel.numeric_results import full_params, global_losses, held_params
from simcomm.parallel.serial import train_serial

from ..helpers import numeric
from ..test_numeric_training import BASE, run

MOE = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=8, padded_vocab_size=32,
                        num_query_groups=2, add_bias_linear=False, num_moe_experts=4, moe_ffn_hidden_size=8,
                        moe_router_topk=2, moe_aux_loss_coeff=1e-2)
# DeepSeek-V3's router: sigmoid scores, group-limited top-k, a bias balancing without loss, a sequence-wise loss, a
# shared expert (gated here, as Qwen2-MoE), the z-loss; the first layer dense
DEEPSEEK = MOE.with_overrides(num_layers=4, num_moe_experts=8, moe_router_topk=4, moe_router_score_function="sigmoid",
                              moe_router_num_groups=4, moe_router_group_topk=2, moe_router_topk_scaling_factor=2.5,
                              moe_router_enable_expert_bias=True, moe_router_bias_update_rate=1e-2,
                              moe_router_load_balancing_type="seq_aux_loss", moe_aux_loss_coeff=1e-3,
                              moe_z_loss_coeff=1e-3, moe_shared_expert_intermediate_size=8,
                              moe_shared_expert_gate=True, moe_layer_freq=[0, 1, 1, 1])


def layout(model=MOE, **kw):
    return numeric(model, **{**BASE, **kw})


CASES = {
    "dp2": dict(dp=2),
    "ep2": dict(dp=2, expert_model_parallel_size=2),
    "ep4-microbatches": dict(dp=4, expert_model_parallel_size=4, micro_batch_size=1),
    "ep2-edp2-overlap": dict(dp=4, expert_model_parallel_size=2, overlap_grad_reduce=True, bucket_size=500),
    "tp2-sp-ep2-etp1": dict(tensor_model_parallel_size=2, sequence_parallel=True, expert_model_parallel_size=2,
                            expert_tensor_parallel_size=1),
    "tp2-sp-etp2": dict(tensor_model_parallel_size=2, sequence_parallel=True),
    "tp2-sp-dp2-ep2-etp2": dict(tensor_model_parallel_size=2, sequence_parallel=True, dp=2,
                                expert_model_parallel_size=2),
    "cp2-ep2": dict(context_parallel_size=2, expert_model_parallel_size=2),
    "pp2-dp2-ep2-zero1": dict(pipeline_model_parallel_size=2, dp=2, expert_model_parallel_size=2, micro_batch_size=2,
                              zero_stage=1),
    "deepseek-dp2-ep2": dict(model=DEEPSEEK, dp=2, expert_model_parallel_size=2, micro_batch_size=2),
    "deepseek-tp2-sp-ep4-etp1-zero1": dict(model=DEEPSEEK, tensor_model_parallel_size=2, sequence_parallel=True,
                                           dp=2, expert_model_parallel_size=4, expert_tensor_parallel_size=1,
                                           zero_stage=1),
    "deepseek-pp2-cp2-ep2": dict(model=DEEPSEEK, pipeline_model_parallel_size=2, context_parallel_size=2,
                                 expert_model_parallel_size=2, micro_batch_size=4),
}


def serial_in_order(lay):
    cfg = lay.config
    return train_serial(lay.model, cfg.make_optimizer(), cfg.train_iters, cfg.global_batch_size,
                        dtype=cfg.params_dtype, micro_batch_size=cfg.micro_batch_size, replicas=lay.dims.dp)


def assert_replicas_equal(lay, res):
    """Every copy of a parameter is bitwise the same: experts on their expert-data-parallel replicas, everything
    else on its data- and context-parallel replicas (and on the TP ranks that replicate it)."""
    held, specs = held_params(res.results), param_specs(lay.model)
    first = {}
    for r in res.results:
        for n, v in held[r["rank"]].items():
            c, e = r["coords"], r["expert_coords"]
            if specs[n].expert:
                key = (n, e["pp"], e["ep"], e["etp"])
            else:
                key = (n, c["pp"], c["tp"] if specs[n].split else None)
            first.setdefault(key, v)
            np.testing.assert_array_equal(v, first[key], err_msg=f"rank {r['rank']} {n}")


@pytest.mark.parametrize("name", list(CASES))
def test_expert_parallel_training_equals_serial(name):
    lay = layout(**CASES[name])
    res = run(lay)
    ref, ref_losses = serial_in_order(lay)
    params = full_params(res.results, lay)
    for n, want in ref.items():
        np.testing.assert_allclose(params[n], want, rtol=0, atol=1e-11 * np.abs(want).max(), err_msg=n)
    np.testing.assert_allclose(global_losses(res.results, lay), ref_losses, rtol=1e-12)
    start = init_params(lay.model, lay.config.seed, lay.config.params_dtype)
    assert not np.allclose(params[WORD], start[WORD])
    assert_replicas_equal(lay, res)


def test_expert_weights_are_sharded_over_ep():
    """Each EP rank holds num_moe_experts / EP experts; under ETP each holds a slice of their FFN width."""
    lay = layout(**CASES["tp2-sp-dp2-ep2-etp2"])
    res = run(lay)
    fc1 = "decoder.layers.0.mlp.experts.linear_fc1.weight"
    shapes = {r["params"][fc1].shape for r in res.results}
    assert shapes == {(2, 16, 8 // 2)}  # 4 experts over EP 2, [h, f] cut over ETP 2 by columns
