"""Train the numeric GPT with any tp x cp x dp x pp layout on simcomm and check it against serial training.

    python examples/training/gpt.py --tp 2 --pp 2 --dp 2 --micro-batch 2 --sequence-parallel
    python examples/training/gpt.py --cp 2 --dp 2 --zero 3 --steps 5
    python examples/training/gpt.py --tp 2 --pp 4 --dp 8 --preset gpt3-1.3b --size-only --global-batch 64

With data it prints the loss of every step next to serial training's and the largest weight difference; with
--size-only (no data: shapes and timing only) the simulated step time and what a rank sent.
"""
import argparse
import time

import numpy as np

import simcomm
from simcomm.parallel import TrainingConfig, build_layout
from simcomm.parallel.model.config import TransformerConfig, model_preset
from simcomm.parallel.numeric_results import full_params, global_losses
from simcomm.parallel.numeric_training import train
from simcomm.parallel.serial import train_serial


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for axis in ("tp", "pp", "cp", "dp"):
        p.add_argument(f"--{axis}", type=int, default=1)
    p.add_argument("--vp", type=int, default=1, help="model chunks per pipeline rank (interleaved 1F1B)")
    p.add_argument("--schedule", default="auto", choices=["auto", "gpipe", "1f1b", "interleaved_1f1b"])
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO stage (1: distributed optimizer)")
    p.add_argument("--overlap", action="store_true", help="overlap gradient reduction with backward")
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=0, help="default: one micro-batch per replica")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--preset", help="a model preset (e.g. gpt3-1.3b) instead of the tiny default")
    p.add_argument("--size-only", action="store_true")
    p.add_argument("--cluster", default="hgx-h100")
    a = p.parse_args()
    model = model_preset(a.preset) if a.preset else TransformerConfig(
        num_layers=4, hidden_size=32, num_attention_heads=4, seq_length=16, padded_vocab_size=64)
    cfg = TrainingConfig(tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp,
                         context_parallel_size=a.cp, virtual_pipeline_model_parallel_size=a.vp if a.vp > 1 else None,
                         pipeline_schedule=a.schedule, sequence_parallel=a.sequence_parallel, zero_stage=a.zero,
                         overlap_grad_reduce=a.overlap, global_batch_size=a.global_batch,
                         micro_batch_size=a.micro_batch or a.global_batch // a.dp,
                         train_iters=1 if a.size_only else a.steps, lr=a.lr, size_only=a.size_only,
                         params_dtype="bfloat16" if a.size_only else "float64")
    layout = build_layout(model, cfg, a.tp * a.pp * a.cp * a.dp)
    wall = time.perf_counter()
    res = simcomm.spawn(train, args=(layout,), nprocs=layout.world_size, cluster=a.cluster,
                        detail="steps" if layout.world_size > 64 else "flows")
    wall = time.perf_counter() - wall
    print(f"{layout.dims.describe()}, {layout.microbatches} microbatches of {cfg.micro_batch_size}, "
          f"{layout.schedule_name}, zero {cfg.stage}: simulated step(s) {res.elapsed * 1e3:.3f} ms "
          f"in {wall:.1f} s wall")
    state = res.results[0]["state_bytes"]
    print("rank 0 keeps " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in state.items()))
    if a.size_only:
        return
    ref, ref_losses = train_serial(model, cfg.make_optimizer(), cfg.train_iters, cfg.global_batch_size)
    for step, (got, want) in enumerate(zip(global_losses(res.results, layout), ref_losses)):
        print(f"step {step}: loss {got:.12f}   serial {want:.12f}")
    params = full_params(res.results, layout)
    worst = max(float(np.abs(params[n] - ref[n]).max()) for n in ref)
    print(f"largest weight difference from serial training: {worst:.3g}")


if __name__ == "__main__":
    main()
