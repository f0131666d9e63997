"""Every parallelism, schedule and combination trains the numeric GPT as serial training does.

Weights after several AdamW steps and the loss of every step are compared with serial training on the whole batch.
Only the order of floating-point sums differs (a batch summed in parts, a matmul cut over tensor-parallel ranks,
attention over context-parallel blocks, a ring all-reduce of more than two ranks), so the comparison is to a
stated tolerance: on float64, weights within 1e-11 of each parameter's largest entry and losses within 1e-12
relative; on float32, weights within 1e-4 absolute (1% of the learning rate: AdamW's m / sqrt(v) turns tiny
gradient differences into up to lr-sized steps) and losses within 1e-6 relative.

Where a layout adds the same terms in the same order as a serial reference whose sums are ordered alike
(train_serial's micro_batch_size and replicas: two data-parallel ranks, whose all-reduce is a + b; pipeline
stages, which accumulate microbatches in order; untied embeddings), the weights and losses are bitwise equal, on
float64 and on float32. Replicas of a parameter are always bitwise equal.
"""
import numpy as np
import pytest

import simcomm
from simcomm.parallel.dims import LayoutError
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.model.gpt import WORD, init_params, param_specs
from simcomm.parallel.numeric_results import full_params, global_losses, held_params
from simcomm.parallel.numeric_training import train
from simcomm.parallel.serial import train_serial

from .helpers import numeric

MODEL = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=8, padded_vocab_size=32,
                          num_query_groups=2)
DEEP = MODEL.with_overrides(num_layers=4)
STEPS = 3

_serial_cache = {}


def serial(layout):
    cfg = layout.config
    key = (layout.model, cfg.params_dtype, cfg.train_iters, cfg.global_batch_size, cfg.make_optimizer())
    if key not in _serial_cache:
        _serial_cache[key] = train_serial(layout.model, cfg.make_optimizer(), cfg.train_iters, cfg.global_batch_size,
                                          dtype=cfg.params_dtype)
    return _serial_cache[key]


def serial_in_order(layout):
    """Serial training with its sums in the layout's order: dp parts, each accumulated over its microbatches."""
    cfg = layout.config
    return train_serial(layout.model, cfg.make_optimizer(), cfg.train_iters, cfg.global_batch_size,
                        dtype=cfg.params_dtype, micro_batch_size=cfg.micro_batch_size, replicas=layout.dims.dp)


def run(layout, cluster="hgx-h100"):
    return simcomm.spawn(train, args=(layout,), nprocs=layout.world_size, cluster=cluster)


def assert_matches_serial(layout, res, rtol=1e-11):
    cfg = layout.config
    ref, ref_losses = serial(layout)
    params = full_params(res.results, layout)
    f32 = cfg.params_dtype == "float32"
    for name, want in ref.items():
        got = params[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if f32:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-4, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=rtol * np.abs(want).max(), err_msg=name)
    np.testing.assert_allclose(global_losses(res.results, layout), ref_losses, rtol=1e-6 if f32 else 1e-12)
    start = init_params(layout.model, cfg.seed, cfg.params_dtype)
    assert not np.allclose(params[WORD], start[WORD])  # training moved the weights


def assert_replicas_equal(layout, res):
    """Every copy of a parameter is bitwise the same: on data-parallel (and context-parallel) replicas, on the
    tensor-parallel ranks that replicate it, and the tied word embedding on the first and last stage. Under
    ZeRO-3 a copy is the one a data-parallel group holds between its ranks, rebuilt from their shards."""
    held = held_params(res.results)
    specs = param_specs(layout.model)
    at = {tuple(sorted(r["coords"].items())): r["rank"] for r in res.results}
    for r in res.results:
        c, mine = r["coords"], held[r["rank"]]
        assert mine and all(v is not None for v in mine.values())

        def rank(**moved):
            return at[tuple(sorted({**c, **moved}.items()))]
        others = [(rank(dp=0, cp=0), list(mine)), (rank(tp=0), [n for n in mine if specs[n].split is None])]
        if c["pp"] == layout.dims.pp - 1 and WORD in mine and layout.dims.pp > 1:
            others.append((rank(pp=0), [WORD]))
        for other, names in others:
            for n in names:
                np.testing.assert_array_equal(mine[n], held[other][n], err_msg=f"rank {r['rank']} {n}")


BASE = dict(train_iters=STEPS, lr=1e-2, weight_decay=0.1)


def layout(model=MODEL, **kw):
    return numeric(model, **{**BASE, **kw})


CASES = {
    "dp2": dict(dp=2),
    "dp4-microbatches-overlap-buckets": dict(dp=4, micro_batch_size=1, overlap_grad_reduce=True,
                                            bucket_size=500),
    "zero1": dict(dp=2, zero_stage=1, micro_batch_size=2, bucket_size=500),
    "zero2": dict(dp=2, zero_stage=2, micro_batch_size=2, bucket_size=500),
    "zero2-overlap": dict(dp=2, zero_stage=2, micro_batch_size=2, overlap_grad_reduce=True),
    "zero3": dict(dp=2, zero_stage=3, micro_batch_size=2),
    "zero3-dp4": dict(dp=4, zero_stage=3),
    "tp2": dict(tensor_model_parallel_size=2),
    "tp2-sp": dict(tensor_model_parallel_size=2, sequence_parallel=True),
    "tp2-sp-mha": dict(tensor_model_parallel_size=2, sequence_parallel=True,
                       model=MODEL.with_overrides(num_query_groups=4)),
    "tp4-untied-nobias": dict(tensor_model_parallel_size=4, model=MODEL.with_overrides(
        num_query_groups=4, untie_embeddings_and_output_weights=True, add_bias_linear=False)),
    "cp2": dict(context_parallel_size=2),
    "odd-sequence": dict(dp=2, model=MODEL.with_overrides(seq_length=7)),  # no CP: nothing to cut in 2 chunks
    "cp4-mqa": dict(context_parallel_size=4, model=MODEL.with_overrides(num_query_groups=1)),
    "pp2-gpipe": dict(pipeline_model_parallel_size=2, micro_batch_size=2, pipeline_schedule="gpipe"),
    "pp2-1f1b": dict(pipeline_model_parallel_size=2, micro_batch_size=1, pipeline_schedule="1f1b"),
    "pp2-interleaved": dict(model=DEEP, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2,
                            micro_batch_size=2, pipeline_schedule="interleaved_1f1b"),
    "pp4-1f1b-untied": dict(model=DEEP.with_overrides(untie_embeddings_and_output_weights=True),
                            pipeline_model_parallel_size=4, micro_batch_size=1),
    "tp2-pp2-dp2": dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, dp=2,
                        micro_batch_size=2, overlap_grad_reduce=True),
    "tp2-sp-pp2-dp2-zero1": dict(tensor_model_parallel_size=2, sequence_parallel=True, pipeline_model_parallel_size=2,
                                 dp=2, micro_batch_size=2, zero_stage=1),
    "tp2-sp-cp2-pp2-zero3-interleaved": dict(model=DEEP, tensor_model_parallel_size=2, sequence_parallel=True,
                                             context_parallel_size=2, pipeline_model_parallel_size=2,
                                             virtual_pipeline_model_parallel_size=2, micro_batch_size=4,
                                             pipeline_schedule="interleaved_1f1b", zero_stage=3),
    "tp2-cp2-pp2-dp2-zero2": dict(tensor_model_parallel_size=2, context_parallel_size=2,
                                  pipeline_model_parallel_size=2, dp=2, micro_batch_size=2,
                                  zero_stage=2, train_iters=2),
}


DEEPER = MODEL.with_overrides(num_layers=8)
SCHEDULES = {  # issue 24: every schedule, pp 2 and 4, interleaved where it applies (8 micro-batches)
    f"pp{pp}-{name}": dict(model=DEEPER, pipeline_model_parallel_size=pp, micro_batch_size=1, pipeline_schedule=name,
                           **({"virtual_pipeline_model_parallel_size": 2} if name in ("looped_bfs", "interleaved_zb")
                              else {}))
    for pp in (2, 4) for name in ("looped_bfs", "zb_h1", "zb_h2", "interleaved_zb", "zbv", "dualpipev", "dualpipe")}
SCHEDULES["pp2-interleaved-group6"] = dict(model=DEEPER, pipeline_model_parallel_size=2, micro_batch_size=1,
                                           virtual_pipeline_model_parallel_size=2, microbatch_group_size_per_vp_stage=6)
SCHEDULES["tp2-dp2-pp2-zero3-zbv"] = dict(model=DEEPER, tensor_model_parallel_size=2, dp=2, micro_batch_size=1,
                                          pipeline_model_parallel_size=2, pipeline_schedule="zbv", zero_stage=3,
                                          overlap_grad_reduce=True, bucket_size=500, train_iters=2)
SCHEDULES["dp2-pp2-zero2-dualpipe"] = dict(model=DEEPER, dp=2, micro_batch_size=1, global_batch_size=16,
                                           pipeline_model_parallel_size=2, pipeline_schedule="dualpipe", zero_stage=2,
                                           train_iters=2)


@pytest.mark.parametrize("name", list(CASES) + list(SCHEDULES))
def test_parallel_training_equals_serial_float64(name):
    lay = layout(**{**CASES, **SCHEDULES}[name])
    res = run(lay)
    assert_matches_serial(lay, res)
    assert_replicas_equal(lay, res)


@pytest.mark.parametrize("name", ["dp2", "tp2-sp", "cp2", "pp2-1f1b", "zero3"])
def test_parallel_training_equals_serial_float32(name):
    lay = layout(params_dtype="float32", **CASES[name])
    res = run(lay, cluster="cpu-host")
    assert_matches_serial(lay, res)


UNTIED = MODEL.with_overrides(untie_embeddings_and_output_weights=True)
IN_ORDER = {  # layouts whose sums run in serial_in_order's order
    "dp2": dict(dp=2),
    "dp2-microbatches-overlap": dict(dp=2, micro_batch_size=2, overlap_grad_reduce=True,
                                     bucket_size=500),
    "zero1-microbatches": dict(dp=2, zero_stage=1, micro_batch_size=2, bucket_size=500),
    "zero2-overlap": dict(dp=2, zero_stage=2, overlap_grad_reduce=True),
    "zero3": dict(dp=2, zero_stage=3),
    "pp2-gpipe-untied": dict(model=UNTIED, pipeline_model_parallel_size=2, micro_batch_size=2,
                             pipeline_schedule="gpipe"),
    "pp2-interleaved-untied": dict(model=DEEP.with_overrides(untie_embeddings_and_output_weights=True),
                                   pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2,
                                   micro_batch_size=2, pipeline_schedule="interleaved_1f1b"),
    "pp2-1f1b-dp2-zero1-untied": dict(model=UNTIED, pipeline_model_parallel_size=2, dp=2,
                                      micro_batch_size=2, zero_stage=1),
    **{f"pp{pp}-{name}-untied": dict(model=DEEPER.with_overrides(untie_embeddings_and_output_weights=True),
                                     pipeline_model_parallel_size=pp, micro_batch_size=1, pipeline_schedule=name)
       for pp in (2, 4) for name in ("zb_h1", "zb_h2", "zbv", "dualpipev")},  # the W's in micro-batch order
    "pp2-interleaved-zb-untied": dict(model=DEEPER.with_overrides(untie_embeddings_and_output_weights=True),
                                      pipeline_model_parallel_size=2, micro_batch_size=1,
                                      virtual_pipeline_model_parallel_size=2, pipeline_schedule="interleaved_zb"),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(IN_ORDER))
def test_bitwise_equal_to_serial_summed_in_the_same_order(name, dtype):
    lay = layout(params_dtype=dtype, **IN_ORDER[name])
    res = run(lay, cluster="cpu-host" if dtype == "float32" else "hgx-h100")
    ref, ref_losses = serial_in_order(lay)
    params = full_params(res.results, lay)
    for n, want in ref.items():
        assert params[n].dtype == want.dtype
        np.testing.assert_array_equal(params[n], want, err_msg=n)
    assert global_losses(res.results, lay) == ref_losses
    assert_replicas_equal(lay, res)


def test_serial_in_order_differs_from_the_whole_batch_only_in_the_last_bits():
    """The ordered reference is the whole-batch one up to the order of sums (so the bitwise checks above are
    checks against serial training), and it is not bitwise the same (so they check the order)."""
    lay = layout(**IN_ORDER["pp2-1f1b-dp2-zero1-untied"])
    ordered, ordered_losses = serial_in_order(lay)
    whole, losses = serial(lay)
    assert any(not np.array_equal(ordered[n], whole[n]) for n in whole)
    for n, want in whole.items():
        np.testing.assert_allclose(ordered[n], want, rtol=0, atol=1e-11 * np.abs(want).max(), err_msg=n)
    np.testing.assert_allclose(ordered_losses, losses, rtol=1e-12)


def test_sgd_with_momentum_under_zero1_and_tp():
    lay = layout(optimizer="sgd", lr=0.5, sgd_momentum=0.9, weight_decay=0.01, dp=2, tensor_model_parallel_size=2,
                 zero_stage=1)
    assert_matches_serial(lay, run(lay))


def test_zero_stages_keep_less_state():
    """Per-rank bytes between steps follow ZeRO's accounting (here parameters, gradients and AdamW's two moments
    all in float64): DDP 4 copies; ZeRO-1 2 + 2/N; ZeRO-2 1 + 3/N; ZeRO-3 4/N (up to bucket padding)."""
    n = 4
    sizes = {}
    for mode, stage in (("ddp", 0), ("zero1", 1), ("zero2", 2), ("zero3", 3)):
        sizes[mode] = run(layout(dp=n, zero_stage=stage, train_iters=1)).results[0]["state_bytes"]
    whole = sizes["ddp"]["params"]
    assert sizes["ddp"] == {"params": whole, "grads": whole, "optimizer": 2 * whole}
    for mode, expect in (("zero1", 2 + 2 / n), ("zero2", 1 + 3 / n), ("zero3", 4 / n)):
        total = sum(sizes[mode].values())
        assert total == pytest.approx(expect * whole, rel=0.01), mode


def test_layout_errors_are_named():
    with pytest.raises(LayoutError, match="num_layers \\(2\\) is not divisible by pipeline_model_parallel_size"):
        layout(pipeline_model_parallel_size=4)
    with pytest.raises(LayoutError, match="num_query_groups \\(2\\) is not divisible by tensor_model_parallel_size "
                                          "\\(4\\)"):
        layout(tensor_model_parallel_size=4)
    with pytest.raises(LayoutError, match="global_batch_size \\(8\\) is not divisible"):
        layout(dp=3, micro_batch_size=1)
    with pytest.raises(LayoutError, match="needs pipeline_model_parallel_size > 1"):
        layout(virtual_pipeline_model_parallel_size=2)
    with pytest.raises(LayoutError, match="zero_stage must be one of 0, 1, 2, 3 or none, got 4"):
        layout(zero_stage=4)
    with pytest.raises(simcomm.SimcommError, match="params_dtype must be one of float16, float32, float64, "
                                                   "bfloat16, bf16, got 'int8'"):
        layout(params_dtype="int8")
    with pytest.raises(simcomm.SimcommError, match="'bfloat16' needs size_only=True: numpy has no bfloat16"):
        layout(params_dtype="bfloat16")
    assert layout(params_dtype="bf16", size_only=True).config.numpy_dtype == np.float16  # the same 2 bytes
    with pytest.raises(LayoutError, match="needs 2 ranks; the job has 4"):
        simcomm.spawn(train, args=(layout(dp=2),), nprocs=4)
