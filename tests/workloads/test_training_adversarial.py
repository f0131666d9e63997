"""Adversarial training configurations (issue 21): hypothesis draws a layout (tp, pp, cp, dp, virtual stages,
micro-batches, recomputation, ZeRO stage, sequence parallelism, precision, overlaps, the model's sizes) that is
mostly valid, then sometimes spoils one field with a hostile value (zero, negative, fractional, huge, a string,
a list, null). Each config is written as a scenario, for the step model (`kind: training`) or for numeric training
(the rank program simcomm.parallel.numeric_training:gpt_training on a small model, with data or size-only), and
goes through `simcomm validate`, `simcomm run` (twice) and, for a cheap step-model one, `simcomm plan`.

Laws (tests/adversarial.py): no hang, no raw traceback (a bad field is a clean error that names it), no negative
or non-finite figure in the JSON, the same output on every run, and what `validate` accepts, `run` runs (a step-
model scenario that validates does not fail as a bad scenario at run time).

CI runs 40 configs, the same ones every run; `pytest -m fuzz tests/workloads/test_training_adversarial.py` runs
1,000 new ones.
"""
from __future__ import annotations

import json
import re
from collections import Counter

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adversarial import cli, clean, figures

HOSTILE = [0, -1, -(10 ** 9), 1.5, 0.0, 10 ** 8, 10 ** 30, 2 ** 63, "x", "8", "", [], [1, 2], {}, None, True,
           float("nan"), float("inf")]
MODEL_KEYS = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "seq_length",
              "padded_vocab_size", "ffn_hidden_size", "kv_channels")
# signed figures in a training result: none (every time, FLOP rate, byte count and loss here is >= 0)
SIGNED: tuple[str, ...] = ("loss", "loss_share")
OUTCOMES: Counter = Counter()
PLANS: Counter = Counter()
GPUS_PER_NODE = 8
NUMERIC_MAX_RANKS = 16


@st.composite
def layouts(draw, numeric: bool):
    """A model and a config that is valid more often than not (its sizes divide as Megatron's rules want)."""
    tp = draw(st.sampled_from([1, 1, 2] if numeric else [1, 1, 2, 4]))
    pp = draw(st.sampled_from([1, 1, 2, 4]))
    cp = draw(st.sampled_from([1, 1, 2]))
    dp = draw(st.sampled_from([1, 2] if numeric else [1, 2, 4]))
    if numeric and tp * pp * cp * dp > NUMERIC_MAX_RANKS:  # a thread per rank: 32 took a minute on a busy host
        dp = 1
    heads = tp * draw(st.sampled_from([1, 2]))
    layers = pp * draw(st.sampled_from([1, 2, 4]))
    model = {"num_layers": layers, "hidden_size": heads * draw(st.sampled_from([4, 8])),
             "num_attention_heads": heads, "seq_length": 2 * cp * tp * draw(st.sampled_from([1, 2, 3])),
             "padded_vocab_size": tp * draw(st.sampled_from([8, 16]))}
    if draw(st.booleans()):
        model["num_query_groups"] = draw(st.sampled_from([tp, heads]))
    mbs = draw(st.sampled_from([1, 1, 2]))
    m = draw(st.sampled_from([1, 2, 3, 4, 8]))
    c = {"tensor_model_parallel_size": tp, "pipeline_model_parallel_size": pp, "context_parallel_size": cp,
         "micro_batch_size": mbs, "global_batch_size": mbs * dp * m,
         "sequence_parallel": draw(st.booleans()) and tp > 1}
    if pp > 1 and layers // pp > 1 and draw(st.booleans()):
        if draw(st.booleans()):
            c["num_layers_per_virtual_pipeline_stage"] = draw(st.sampled_from([1, layers // pp // 2 or 1]))
        else:
            c["virtual_pipeline_model_parallel_size"] = draw(st.sampled_from([2, layers // pp]))
    virtual = "num_layers_per_virtual_pipeline_stage" in c or "virtual_pipeline_model_parallel_size" in c
    schedule = draw(st.sampled_from(["auto", "auto", "interleaved_1f1b"] if virtual else ["auto", "1f1b", "gpipe"]))
    if schedule != "auto":
        c["pipeline_schedule"] = schedule
    recompute = draw(st.sampled_from([None, None, "full", "selective"]))
    if recompute:
        c["recompute_granularity"] = recompute
        if recompute == "full" and draw(st.booleans()):
            c["recompute_method"] = "block"
            c["recompute_num_layers"] = draw(st.sampled_from([1, 2]))
    zero = draw(st.sampled_from([None, None, 0, 1, 2, 3]))
    if zero is not None:
        c["zero_stage"] = zero
    if zero is None and draw(st.booleans()):  # Megatron-FSDP's spelling, under another framework's semantics
        c["data_parallel_sharding_strategy"] = draw(st.sampled_from(["no_shard", "optim", "optim_grads",
                                                                     "optim_grads_params"]))
        c["framework"] = draw(st.sampled_from(["megatron", "torchtitan", "deepspeed"]))
    elif draw(st.booleans()):
        c["use_distributed_optimizer"] = zero != 0
        c["overlap_grad_reduce"] = draw(st.booleans())
        c["overlap_param_gather"] = c["overlap_grad_reduce"] and draw(st.booleans())
    precision = draw(st.sampled_from(["bf16", "bf16", "fp16", "fp32", "tf32", "fp8"]))
    c.update({"fp16": {"bf16": False, "fp16": True}, "fp32": {"bf16": False, "tf32": False},
              "tf32": {"bf16": False, "tf32": True}, "fp8": {"fp8_format": "hybrid"}}.get(precision, {}))
    if numeric:
        c.update(train_iters=draw(st.sampled_from([1, 2])), size_only=draw(st.booleans()),
                 params_dtype=draw(st.sampled_from(["float64", "float32"])))
    else:
        c.update({k: draw(st.booleans()) for k in ("tp_comm_overlap", "overlap_p2p_comm", "use_flash_attn")
                  if draw(st.booleans())})
    world = tp * pp * cp * dp
    if not numeric:  # the rank program's world is its job's ranks
        c["world_size"] = world
    return model, c, world


@st.composite
def configs(draw):
    """(which execution, scenario text, what was spoiled or None)."""
    numeric = draw(st.sampled_from([False, True]))
    model, c, world = draw(layouts(numeric))
    spoiled = None
    if draw(st.integers(0, 2)) == 1:  # one field in three configs is hostile
        keys = sorted(c) + list(MODEL_KEYS) + ["global_batch_size", "micro_batch_size", "world_size", "colour"]
        spoiled = draw(st.sampled_from(keys))
        value = draw(st.sampled_from(HOSTILE))
        (model if spoiled in MODEL_KEYS else c)[spoiled] = value
    nodes = max(1, -(-world // GPUS_PER_NODE)) if isinstance(world, int) else 1
    if numeric:
        workload = {"kind": "program", "program": "simcomm.parallel.numeric_training:gpt_training",
                    "ranks": world, "args": [{"model": model, **c}]}
    else:
        workload = {"kind": "training", **model, **c}
    doc = {"name": "adv", "cluster": {"preset": "hgx-h100", "nodes": nodes}, "workload": workload}
    return ("numeric" if numeric else "step"), yaml.safe_dump(doc, sort_keys=False), spoiled


def _json(out: str):
    try:
        return json.loads(out)
    except ValueError:
        raise AssertionError(f"not JSON: {out[:500]}") from None


def check(case, tmp_path, plan: bool = True) -> str:
    """validate, run twice, plan: the laws; returns the outcome."""
    what, text, spoiled = case
    path = tmp_path / "adv.yaml"
    path.write_text(text)
    code, out, err = cli(["validate", str(path)], 60)
    clean(0 if code == 2 else code, err, f"validate {what} ({spoiled})\n{text}", codes=(0,))
    if code:  # a scenario error: the file, line and key path
        assert re.match(r"\S*adv.yaml:\d+: workload", err), err
        if spoiled and what == "step":
            assert spoiled in err or "workload:" in err, f"{spoiled} spoiled, but the error is:\n{err}"
        return "refused by validate"
    runs = [cli(["run", str(path), "--json", "--no-files"], 60) for _ in range(2)]
    (code, out, err), again = runs[0], runs[1]
    clean(code, err, f"run {what} ({spoiled})\n{text}")
    assert (code, out, err) == again, f"two runs differ:\n{text}"
    if what == "step":
        assert code != 2, f"validate accepted, run refused it:\n{text}\n{err}"
    if code:
        return "failed at run"
    figures(_json(out), "run", SIGNED)
    if plan and what == "step":
        _plan(path, text)
    return "ran"


def _plan(path, text) -> None:
    PLANS["plan"] += 1
    code, out, err = cli(["plan", str(path), "--json", "--jobs", "1", "--max-simulate", "2", "--simulate", "1",
                          "--tp", "1,2", "--pp", "1,2", "--cp", "1", "--mbs", "1", "--zero", "0,1",
                          "--recompute", "none", "--schedules", "1f1b"], 120)
    clean(code, err, f"plan\n{text}")
    if code == 0:
        figures(_json(out), "plan")


COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck))


@settings(max_examples=40, derandomize=True, **COMMON)
@given(configs())
def test_training_configs_run_or_refuse_cleanly(tmp_path_factory, case):
    OUTCOMES[(case[0], check(case, tmp_path_factory.mktemp("adv"), plan=PLANS["plan"] < 3))] += 1


def test_the_sample_reaches_runs_and_refusals(tmp_path_factory):
    """The laws hold vacuously if every config is refused: the CI sample must run both executions and refuse
    some."""
    if sum(OUTCOMES.values()) < 40:  # run alone (-k)
        test_training_configs_run_or_refuse_cleanly(tmp_path_factory)
    print(f"\ntraining configs: {dict(OUTCOMES)}")
    assert OUTCOMES[("step", "ran")] >= 8 and OUTCOMES[("numeric", "ran")] >= 3
    assert sum(v for (_, o), v in OUTCOMES.items() if o != "ran") >= 5 and PLANS["plan"] == 3


FUZZ: Counter = Counter()


@settings(max_examples=1_000, derandomize=False, database=None, **COMMON)
@given(configs())
def _fuzz(tmp_path_factory, case):
    FUZZ[(case[0], check(case, tmp_path_factory.mktemp("fuzz")))] += 1


@pytest.mark.fuzz
def test_fuzz_training_configs(tmp_path_factory):
    """1,000 new configs; deselected by default, run with `pytest -m fuzz`."""
    _fuzz(tmp_path_factory)
    print(f"\nfuzz: {dict(FUZZ)}")
    assert sum(FUZZ.values()) >= 1_000


# ---- what the suite found, each a regression test -----------------------------------------------------------
TINY = {"kind": "training", "num_layers": 1, "hidden_size": 4, "num_attention_heads": 1, "seq_length": 2,
        "padded_vocab_size": 16, "global_batch_size": 1, "world_size": 1}


def _scenario(tmp_path, workload: dict, nodes: int = 1):
    path = tmp_path / "adv.yaml"
    path.write_text(yaml.safe_dump({"name": "adv", "cluster": {"preset": "hgx-h100", "nodes": nodes},
                                    "workload": workload}, sort_keys=False))
    return path


def test_no_breakdown_category_is_a_hair_below_zero(tmp_path):
    """A one-GPU step of a tiny model: a kernel nothing slowed ended a rounding error before its start plus its
    time alone, and the breakdown's interference was -1.5e-20 s."""
    code, out, err = cli(["run", str(_scenario(tmp_path, TINY)), "--json", "--no-files"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["rows"][0]["interference"] == 0.0
    figures(doc, "run")


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_huge_global_batch_is_refused_at_once(tmp_path, command):
    """global_batch_size 10**8 validated, then would have run for about 15 hours with no progress shown (issue 21):
    validate and run refuse it within seconds, naming the field and the bound."""
    path = _scenario(tmp_path, {**TINY, "global_batch_size": 10 ** 8})
    code, out, err = cli([command, str(path)], 30)
    assert code == 2 and re.match(r"\S*adv.yaml:\d+: workload.global_batch_size: global_batch_size \(100,000,000\) "
                                  r"makes 100,000,000 micro-batches .* at most 65,536 a step", err), err


@pytest.mark.parametrize("size_only", [False, True])
def test_numeric_training_refuses_arrays_larger_than_the_host_bound(tmp_path, size_only):
    """A numeric config with hidden_size 20,000 allocated the whole model on every rank until numpy ran out of
    memory (a MemoryError's traceback; at sizes the host could just hold, the machine swapped): refused before any
    array exists, naming the field, unless size_only (no arrays at all: it runs)."""
    model = {"num_layers": 4, "hidden_size": 20_000, "num_attention_heads": 4, "seq_length": 16,
             "padded_vocab_size": 64}
    path = _scenario(tmp_path, {"kind": "program", "program": "simcomm.parallel.numeric_training:gpt_training",
                                "ranks": 2, "args": [{"model": model, "global_batch_size": 2, "size_only": size_only,
                                                      "params_dtype": "float32"}]})
    code, out, err = cli(["run", str(path), "--json", "--no-files"])
    if size_only:
        assert code == 0, err
        figures(json.loads(out), "run", SIGNED)
        return
    assert code == 2 and err.startswith(
        "simcomm: error: rank 0: numeric training with data holds at least 572.3 GiB on this host (2 ranks x the "
        "model's 19,202,680,000 parameters with their gradients and optimizer state, and the batch's 2 x 16 tokens), "
        "more than 4 GiB: a smaller hidden_size, or size_only: true"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    ("[1, 2]", "gpt_training's settings must be a mapping of TrainingConfig fields, got [1, 2]"),
    ("{colour: 1, global_batch_size: 1}", "gpt_training's settings: unknown setting 'colour'"),
    ("{micro_batch_size: 1}", "gpt_training's settings: give global_batch_size"),
    ("{model: 5, global_batch_size: 1}", "model must be a mapping of TransformerConfig fields or a preset name, got 5"),
    ("{model: {num_layers: 2, bogus: 1}, global_batch_size: 1}", "model: unknown setting 'bogus'"),
    ("{model: {num_layers: 2}, global_batch_size: 1}",
     "model: give hidden_size, num_attention_heads, seq_length, padded_vocab_size")])
def test_the_numeric_training_program_checks_its_settings(tmp_path, args, message):
    """gpt_training given a list, an unknown key, a model that is not a mapping or misses a size: a TypeError's
    traceback through simcomm in every rank; now an error naming the setting."""
    path = tmp_path / "adv.yaml"
    path.write_text("name: adv\ncluster: {preset: hgx-h100}\nworkload:\n  kind: program\n"
                    f"  program: simcomm.parallel.numeric_training:gpt_training\n  ranks: 1\n  args: [{args}]\n")
    code, out, err = cli(["run", str(path), "--no-files"])
    assert code == 2 and err == f"simcomm: error: rank 0: {message}\n", err
