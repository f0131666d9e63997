"""The step model's predictions beside published end-to-end training figures (docs/training.md's table).

    python examples/training/step_vs_published.py            # every row (about a minute on a loaded 2-core box)
    python examples/training/step_vs_published.py k22 n1.7   # some rows, by key
    python examples/training/step_vs_published.py --json     # one JSON object per row
    python examples/training/step_vs_published.py --markdown # docs/training.md's table rows and mean line
    python examples/training/step_vs_published.py --ablation # each row with every mechanism, then each one off
    python examples/training/step_vs_published.py --no-interference   # compute and communication not sharing GPUs

Each row is the source's model and layout on the matching simulated cluster; the metric is the source's (its
FLOPs formula and peak). Settings a source does not give are assumptions, listed in docs/training.md.
"""
import json
import sys
import time

from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, TransformerConfig, build_layout, model_preset
from simcomm.parallel.model.flops import megatron_flops_per_token


def gpt(h, a, L, name, s=2048, V=51200):
    return TransformerConfig(L, h, a, s, V, name=name)


NARAYANAN = dict(bf16=False, fp16=True, recompute_granularity="full", use_flash_attn=False, micro_batch_size=1,
                 flops_formula="narayanan", scatter_gather_tensors_in_pipeline=True)  # Megatron-LM 2021's default
KORTHIKANTI = dict(bf16=False, fp16=True, recompute_granularity="selective", sequence_parallel=True,
                   use_flash_attn=False, micro_batch_size=1, flops_formula="narayanan")
LLAMA = dict(sequence_parallel=True, micro_batch_size=1, use_distributed_optimizer=True, overlap_grad_reduce=True,
             overlap_param_gather=True, account_for_embedding_in_pipeline_split=True,
             account_for_loss_in_pipeline_split=True, num_layers_per_virtual_pipeline_stage=4,
             recompute_granularity="full", recompute_method="block", recompute_num_layers=1)

# (key, source, metric, published, preset, gpus, model, settings)
ROWS = [
    ("n1.7", "Narayanan 2021 Table 1", "tflops_eq3", 137, "dgx-a100", 32, gpt(2304, 24, 24, "1.7B"),
     dict(NARAYANAN, tensor_model_parallel_size=1, pipeline_model_parallel_size=1, global_batch_size=512)),
    ("n3.6", "Narayanan 2021 Table 1", "tflops_eq3", 138, "dgx-a100", 64, gpt(3072, 32, 30, "3.6B"),
     dict(NARAYANAN, tensor_model_parallel_size=2, pipeline_model_parallel_size=1, global_batch_size=512)),
    ("n7.5", "Narayanan 2021 Table 1", "tflops_eq3", 142, "dgx-a100", 128, gpt(4096, 32, 36, "7.5B"),
     dict(NARAYANAN, tensor_model_parallel_size=4, pipeline_model_parallel_size=1, global_batch_size=512)),
    ("n18", "Narayanan 2021 Table 1", "tflops_eq3", 135, "dgx-a100", 256, gpt(6144, 48, 40, "18.4B"),
     dict(NARAYANAN, tensor_model_parallel_size=8, pipeline_model_parallel_size=1, global_batch_size=1024)),
    ("n39", "Narayanan 2021 Table 1", "tflops_eq3", 138, "dgx-a100", 512, gpt(8192, 64, 48, "39.1B"),
     dict(NARAYANAN, tensor_model_parallel_size=8, pipeline_model_parallel_size=2, global_batch_size=1536)),
    ("n76", "Narayanan 2021 Table 1", "tflops_eq3", 140, "dgx-a100", 1024, gpt(10240, 80, 60, "76.1B"),
     dict(NARAYANAN, tensor_model_parallel_size=8, pipeline_model_parallel_size=4, global_batch_size=1792)),
    ("n145", "Narayanan 2021 Table 1", "tflops_eq3", 148, "dgx-a100", 1536, gpt(12288, 96, 80, "145.6B"),
     dict(NARAYANAN, tensor_model_parallel_size=8, pipeline_model_parallel_size=8, global_batch_size=2304)),
    ("n310", "Narayanan 2021 Table 1", "tflops_eq3", 155, "dgx-a100", 1920, gpt(16384, 128, 96, "310.1B"),
     dict(NARAYANAN, tensor_model_parallel_size=8, pipeline_model_parallel_size=16, global_batch_size=2160)),
    ("n530", "Narayanan 2021 Table 1", "tflops_eq3", 163, "dgx-a100", 2520, gpt(20480, 128, 105, "529.6B"),
     dict(NARAYANAN, tensor_model_parallel_size=8, pipeline_model_parallel_size=35, global_batch_size=2520)),
    ("n1t", "Narayanan 2021 Table 1", "tflops_eq3", 163, "dgx-a100", 3072, gpt(25600, 160, 128, "1008B"),
     dict(NARAYANAN, tensor_model_parallel_size=8, pipeline_model_parallel_size=64, global_batch_size=3072)),
    ("g175", "Narayanan 2021 section 5.1", "tflops_eq3", 140, "dgx-a100", 1024,
     model_preset("gpt3-175b"), dict(NARAYANAN, tensor_model_parallel_size=8, pipeline_model_parallel_size=8,
                                     num_layers_per_virtual_pipeline_stage=6, global_batch_size=1536)),
    ("k22", "Korthikanti 2022", "mfu", 41.5, "dgx-a100", 8, gpt(6144, 64, 48, "22B"),
     dict(KORTHIKANTI, tensor_model_parallel_size=8, pipeline_model_parallel_size=1, global_batch_size=4)),
    ("k175", "Korthikanti 2022", "mfu", 51.4, "dgx-a100", 64, model_preset("gpt3-175b"),
     dict(KORTHIKANTI, tensor_model_parallel_size=8, pipeline_model_parallel_size=8, global_batch_size=64)),
    ("k530", "Korthikanti 2022", "mfu", 56.0, "dgx-a100", 280, gpt(20480, 128, 105, "530B"),
     dict(KORTHIKANTI, tensor_model_parallel_size=8, pipeline_model_parallel_size=35, global_batch_size=280)),
    ("k1t", "Korthikanti 2022", "mfu", 56.3, "dgx-a100", 512, gpt(25600, 160, 128, "1T"),
     dict(KORTHIKANTI, tensor_model_parallel_size=8, pipeline_model_parallel_size=64, global_batch_size=512)),
    ("l8k", "Llama 3 Table 4", "tflops", 430, "hgx-h100", 8192, model_preset("llama3-405b"),
     dict(LLAMA, tensor_model_parallel_size=8, pipeline_model_parallel_size=16, global_batch_size=2048)),
    ("l16k", "Llama 3 Table 4", "tflops", 400, "hgx-h100", 16384, model_preset("llama3-405b"),
     dict(LLAMA, tensor_model_parallel_size=8, pipeline_model_parallel_size=16, global_batch_size=2048)),
    ("l16kcp", "Llama 3 Table 4", "tflops", 380, "hgx-h100", 16384,
     model_preset("llama3-405b", seq_length=131072),
     dict(LLAMA, tensor_model_parallel_size=8, pipeline_model_parallel_size=16, context_parallel_size=16,
          global_batch_size=128)),
    ("ms12k", "MegaScale 2024", "mfu", 55.2, "dgx-a100", 12288, model_preset("gpt3-175b"),
     dict(tensor_model_parallel_size=8, pipeline_model_parallel_size=8, num_layers_per_virtual_pipeline_stage=6,
          sequence_parallel=True, micro_batch_size=1, global_batch_size=6144, use_distributed_optimizer=True,
          overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True, overlap_p2p_comm=True,
          recompute_granularity="selective", flops_formula="narayanan")),
]


def run(row, interference: bool = True, changes=None):
    key, source, metric, published, preset, gpus, model, settings = row
    t = time.perf_counter()
    cluster = build_cluster(preset, nodes=gpus // 8, tuning_changes=None if interference else {"interference": False})
    layout = build_layout(model, TrainingConfig(**{**settings, **(changes or {})}), cluster.num_ranks)
    sim = StepModel(layout, cluster, check_memory=False)
    res = sim.run()
    pred = {"tflops_eq3": res.hardware_flops / res.step_time / res.world / 1e12,
            "tflops": res.tflops_per_gpu, "mfu": 100 * res.mfu}[metric]
    out = {"key": key, "source": source, "model": model.name, "gpus": gpus, "layout": layout.describe(),
           "metric": metric, "published": published, "predicted": pred, "error": pred / published - 1,
           "step_time": res.step_time, "mfu": res.mfu, "hfu": res.hfu, "peak_memory_gib": res.peak_memory / 2**30,
           "fits": all(m.fits for m in res.memory), "breakdown": {k: v / res.step_time for k, v in
                                                                   res.breakdown.items()},
           "wall": time.perf_counter() - t}
    if metric == "tflops":  # the Llama rows also with Megatron's causal halving of core attention
        out["tflops_causal"] = (megatron_flops_per_token(model, causal=True) * res.tokens / res.step_time /
                                res.world / 1e12)
    out["markdown"] = markdown_row(out, layout, preset)
    return out


GPU = {"dgx-a100": "A100", "hgx-h100": "H100"}
METRIC = {"tflops_eq3": "TFLOP/s/GPU (eq. 3)", "tflops": "TFLOP/s/GPU", "mfu": "MFU"}
HEADER = ("| source | model, GPUs | layout | metric | published | predicted | error |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")


def markdown_row(r, layout, preset) -> str:
    """The row of docs/training.md's table (tests/parallel/test_step_examples.py compares them)."""
    c, d, model = layout.config, layout.dims, layout.model
    seq = f" (seq {model.seq_length:,})" if model.seq_length != 2048 else ""
    shape = f"t{d.tp}" + (f" c{d.cp}" if d.cp > 1 else "") + f" p{d.pp} d{d.dp}" + \
        (f" v{layout.chunks}" if layout.chunks > 1 else "") + (", SP" if c.sp else "") + \
        (f", {c.recompute_granularity} recompute" if c.recompute_granularity else "") + \
        (f" ({c.recompute_num_layers} layer per chunk)" if c.recompute_method == "block" else "") + \
        f", B {c.global_batch_size}"
    unit = "%" if r["metric"] == "mfu" else ""
    return (f"| {r['source']} | {model.name}{seq}, {r['gpus']:,} {GPU[preset]} | {shape} | {METRIC[r['metric']]} | "
            f"{r['published']:{'.1f' if unit else 'g'}}{unit} | {r['predicted']:.1f}{unit} | {r['error']:+.1%} |")


# the mechanisms an ablation turns off one at a time: (column, interference, configuration changes)
MECHANISMS = (("interference off", False, {}), ("p2p rendezvous off", True, {"p2p_rendezvous": False}),
              ("step collectives off", True, {"step_collectives": False}),
              ("pipeline scatter/gather off", True, {"scatter_gather_tensors_in_pipeline": False}))
ABLATION = ("| source | model, GPUs | metric | published | every mechanism | " +
            " | ".join(m[0] for m in MECHANISMS) + " | interference's share of the step |\n" +
            "| --- " * (6 + len(MECHANISMS)) + "|")


def ablation(row) -> str:
    """A row of docs/training.md's ablation table: the prediction with every mechanism, then with each one off
    (a mechanism the row does not use: the same figure)."""
    on = run(row)
    unit = "%" if on["metric"] == "mfu" else ""
    fmt = ".1f" if unit else "g"

    def cell(r):
        return f"{r['predicted']:.1f}{unit} ({r['error']:+.1%})"
    cfg, offs = TrainingConfig(**row[7]), []
    for _, interference, changes in MECHANISMS:
        used = all(getattr(cfg, k) != v for k, v in changes.items()) and \
            ("scatter_gather_tensors_in_pipeline" not in changes or (cfg.tensor_model_parallel_size > 1 and not cfg.sp
                                                                     and cfg.pipeline_model_parallel_size > 1))
        offs.append(cell(run(row, interference, changes)) if used else "=")
    return (f"| {on['source']} | {on['model']}, {on['gpus']:,} | {METRIC[on['metric']]} | "
            f"{on['published']:{fmt}}{unit} | {cell(on)} | " + " | ".join(offs) +
            f" | {max(on['breakdown'].get('interference', 0.0), 0.0):.1%} |")  # float noise can dip below 0


def main(argv) -> int:
    as_json, as_markdown, as_ablation = "--json" in argv, "--markdown" in argv, "--ablation" in argv
    interference = "--no-interference" not in argv
    want = [a for a in argv if a not in ("--json", "--markdown", "--ablation", "--no-interference")]
    unknown = set(want) - {r[0] for r in ROWS}
    if unknown:
        print(f"unknown row(s) {', '.join(sorted(unknown))}; rows: {', '.join(r[0] for r in ROWS)}", file=sys.stderr)
        return 2
    if as_ablation:
        print(ABLATION, flush=True)
        for row in ROWS:
            if not want or row[0] in want:
                print(ablation(row), flush=True)
        return 0
    if as_markdown:
        print(HEADER, flush=True)
    done = []
    for row in ROWS:
        if want and row[0] not in want:
            continue
        r = run(row, interference)
        done.append(r)
        if as_json:
            print(json.dumps(r), flush=True)
        elif as_markdown:
            print(r["markdown"], flush=True)
        else:
            unit = "%" if r["metric"] == "mfu" else " TFLOP/s"
            print(f"{r['key']:<7} {r['source']:<28} {r['model']:<11} {r['gpus']:>6} GPUs  {r['metric']:<10} "
                  f"published {r['published']:g}{unit}  predicted {r['predicted']:.1f}{unit}  error "
                  f"{r['error']:+.1%}" + ("" if r["fits"] else f"  (needs {r['peak_memory_gib']:.0f} GiB per GPU)"),
                  flush=True)
    if not as_json:
        errors = [r["error"] for r in done]
        high, low = max(done, key=lambda r: r["error"]), min(done, key=lambda r: r["error"])
        print(f"\nMean |error| over the {len(done)} rows: {sum(map(abs, errors)) / len(errors):.1%}; worst "
              f"{high['error']:+.1%} ({high['key']}), {low['error']:+.1%} ({low['key']}).")
        causal = [f"{r['key']} {r['tflops_causal']:.0f}" for r in done if "tflops_causal" in r]
        if causal:
            print(f"TFLOP/s per GPU with Megatron's causal halving of core attention: {', '.join(causal)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
