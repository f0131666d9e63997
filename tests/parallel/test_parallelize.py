"""Every parallelism, schedule and combination trains the numeric GPT exactly as serial training does.

Weights after several AdamW steps and the loss of every step are compared with serial training on the whole batch:
on float64 to 1e-11 relative to each parameter's largest entry (only the order of floating-point sums differs),
on float32 to 1e-4 absolute in the weights (1% of the learning rate: AdamW's m / sqrt(v) turns tiny gradient
differences into up to lr-sized steps) and 1e-6 relative in the loss.
"""
import numpy as np
import pytest

import simcomm
from simcomm.parallel.dims import LayoutError
from simcomm.parallel.model.config import TransformerConfig
from simcomm.parallel.model.gpt import WORD, init_params
from simcomm.parallel.parallelize import train
from simcomm.parallel.results import full_params, global_losses
from simcomm.parallel.serial import train_serial
from simcomm.parallel.train_config import TrainConfig

MODEL = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=8, padded_vocab_size=32,
                          num_query_groups=2)
DEEP = MODEL.with_overrides(num_layers=4)
STEPS = 3

_serial_cache = {}


def serial(cfg: TrainConfig):
    key = (cfg.model, cfg.params_dtype, cfg.train_iters, cfg.global_batch_size, cfg.optimizer,
           tuple(sorted(cfg.optimizer_args.items())))
    if key not in _serial_cache:
        _serial_cache[key] = train_serial(cfg.model, cfg.make_optimizer(), cfg.train_iters, cfg.global_batch_size,
                                          dtype=cfg.params_dtype)
    return _serial_cache[key]


def run(cfg: TrainConfig, cluster="hgx-h100"):
    return simcomm.spawn(train, args=(cfg,), nprocs=cfg.world_size, cluster=cluster)


def assert_matches_serial(cfg: TrainConfig, res, rtol=1e-11):
    ref, ref_losses = serial(cfg)
    params = full_params(res.results, cfg)
    f32 = cfg.params_dtype == "float32"
    for name, want in ref.items():
        got = params[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if f32:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-4, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=rtol * np.abs(want).max(), err_msg=name)
    np.testing.assert_allclose(global_losses(res.results, cfg), ref_losses, rtol=1e-6 if f32 else 1e-12)
    start = init_params(cfg.model, cfg.seed, cfg.params_dtype)
    assert not np.allclose(params[WORD], start[WORD])  # training moved the weights


def assert_replicas_equal(cfg: TrainConfig, res):
    """Data-parallel replicas (and the tied embedding's two copies) hold bitwise identical weights."""
    by_place = {}
    for r in res.results:
        if r["params"]:
            c = r["coords"]
            by_place.setdefault((c["pp"], c["tp"]), []).append(r["params"])
    for replicas in by_place.values():
        for other in replicas[1:]:
            for n in replicas[0]:
                np.testing.assert_array_equal(other[n], replicas[0][n], err_msg=n)
    if cfg.dims.pp > 1 and not cfg.model.untie_embeddings_and_output_weights:
        for r in res.results:
            c = r["coords"]
            if c["pp"] == cfg.dims.pp - 1 and r["params"]:
                first = next(x for x in res.results if x["coords"] == {**c, "pp": 0})
                np.testing.assert_array_equal(r["params"][WORD], first["params"][WORD])


BASE = TrainConfig(MODEL, global_batch_size=8, train_iters=STEPS, optimizer_args={"lr": 1e-2, "weight_decay": 0.1})

CASES = {
    "dp2": dict(data_parallel_size=2),
    "dp4-microbatches-overlap-buckets": dict(data_parallel_size=4, micro_batch_size=1, overlap_grad_reduce=True,
                                            bucket_size=500),
    "zero1": dict(data_parallel_size=2, data_parallel="zero1", micro_batch_size=2, bucket_size=500),
    "zero2": dict(data_parallel_size=2, data_parallel="zero2", micro_batch_size=2, bucket_size=500),
    "zero2-overlap": dict(data_parallel_size=2, data_parallel="zero2", micro_batch_size=2, overlap_grad_reduce=True),
    "zero3": dict(data_parallel_size=2, data_parallel="zero3", micro_batch_size=2),
    "zero3-dp4": dict(data_parallel_size=4, data_parallel="zero3"),
    "tp2": dict(tensor_model_parallel_size=2),
    "tp2-sp": dict(tensor_model_parallel_size=2, sequence_parallel=True),
    "tp2-sp-mha": dict(tensor_model_parallel_size=2, sequence_parallel=True,
                       model=MODEL.with_overrides(num_query_groups=4)),
    "tp4-untied-nobias": dict(tensor_model_parallel_size=4, model=MODEL.with_overrides(
        num_query_groups=4, untie_embeddings_and_output_weights=True, add_bias_linear=False)),
    "cp2": dict(context_parallel_size=2),
    "cp4-mqa": dict(context_parallel_size=4, model=MODEL.with_overrides(num_query_groups=1)),
    "pp2-gpipe": dict(pipeline_model_parallel_size=2, micro_batch_size=2, pipeline_schedule="gpipe"),
    "pp2-1f1b": dict(pipeline_model_parallel_size=2, micro_batch_size=1, pipeline_schedule="1f1b"),
    "pp2-interleaved": dict(model=DEEP, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2,
                            micro_batch_size=2, pipeline_schedule="interleaved_1f1b"),
    "pp4-1f1b-untied": dict(model=DEEP.with_overrides(untie_embeddings_and_output_weights=True),
                            pipeline_model_parallel_size=4, micro_batch_size=1),
    "tp2-pp2-dp2": dict(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, data_parallel_size=2,
                        micro_batch_size=2, overlap_grad_reduce=True),
    "tp2-sp-pp2-dp2-zero1": dict(tensor_model_parallel_size=2, sequence_parallel=True, pipeline_model_parallel_size=2,
                                 data_parallel_size=2, micro_batch_size=2, data_parallel="zero1"),
    "tp2-sp-cp2-pp2-zero3-interleaved": dict(model=DEEP, tensor_model_parallel_size=2, sequence_parallel=True,
                                             context_parallel_size=2, pipeline_model_parallel_size=2,
                                             virtual_pipeline_model_parallel_size=2, micro_batch_size=4,
                                             pipeline_schedule="interleaved_1f1b", data_parallel="zero3"),
    "tp2-cp2-pp2-dp2-zero2": dict(tensor_model_parallel_size=2, context_parallel_size=2,
                                  pipeline_model_parallel_size=2, data_parallel_size=2, micro_batch_size=2,
                                  data_parallel="zero2", train_iters=2),
}


@pytest.mark.parametrize("name", list(CASES))
def test_parallel_training_equals_serial_float64(name):
    cfg = BASE.replace(**CASES[name])
    res = run(cfg)
    assert_matches_serial(cfg, res)
    assert_replicas_equal(cfg, res)


@pytest.mark.parametrize("name", ["dp2", "tp2-sp", "cp2", "pp2-1f1b", "zero3"])
def test_parallel_training_equals_serial_float32(name):
    cfg = BASE.replace(params_dtype="float32", **CASES[name])
    res = run(cfg, cluster="cpu-host")
    assert_matches_serial(cfg, res)


def test_sgd_with_momentum_under_zero1_and_tp():
    cfg = BASE.replace(optimizer="sgd", optimizer_args={"lr": 0.5, "momentum": 0.9, "weight_decay": 0.01},
                       data_parallel_size=2, tensor_model_parallel_size=2, data_parallel="zero1")
    assert_matches_serial(cfg, run(cfg))


def test_zero_stages_keep_less_state():
    """Per-rank bytes between steps follow ZeRO's accounting (here parameters, gradients and AdamW's two moments
    all in float64): DDP 4 copies; ZeRO-1 2 + 2/N; ZeRO-2 1 + 3/N; ZeRO-3 4/N (up to bucket padding)."""
    n = 4
    sizes = {}
    for mode in ("ddp", "zero1", "zero2", "zero3"):
        cfg = BASE.replace(data_parallel_size=n, data_parallel=mode, train_iters=1)
        sizes[mode] = run(cfg).results[0]["state_bytes"]
    whole = sizes["ddp"]["params"]
    assert sizes["ddp"] == {"params": whole, "grads": whole, "optimizer": 2 * whole}
    for mode, expect in (("zero1", 2 + 2 / n), ("zero2", 1 + 3 / n), ("zero3", 4 / n)):
        total = sum(sizes[mode].values())
        assert total == pytest.approx(expect * whole, rel=0.01), mode


def test_layout_errors_are_named():
    with pytest.raises(LayoutError, match="num_layers 2 is not divisible"):
        BASE.replace(pipeline_model_parallel_size=4)
    with pytest.raises(LayoutError, match="num_query_groups 2 is not divisible by tensor_model_parallel_size 4"):
        BASE.replace(tensor_model_parallel_size=4)
    with pytest.raises(LayoutError, match="global_batch_size 8 is not divisible"):
        BASE.replace(data_parallel_size=3)
    with pytest.raises(LayoutError, match="needs pipeline_model_parallel_size > 1"):
        BASE.replace(virtual_pipeline_model_parallel_size=2)
    with pytest.raises(simcomm.SimcommError, match="data_parallel must be one of"):
        BASE.replace(data_parallel="zero4")
    with pytest.raises(LayoutError, match="needs 2 ranks; the job has 4"):
        simcomm.spawn(train, args=(BASE.replace(data_parallel_size=2),), nprocs=4)
