"""Train the numeric GPT with any tp x cp x dp x pp layout on simcomm and check it against serial training.

    python examples/training/gpt.py --tp 2 --pp 2 --dp 2 --micro-batch 2 --sequence-parallel
    python examples/training/gpt.py --cp 2 --dp 2 --data-parallel zero3 --steps 5
    python examples/training/gpt.py --tp 2 --pp 4 --dp 8 --preset gpt3-1.3b --size-only --global-batch 64

With data it prints the loss of every step next to serial training's and the largest weight difference; with
--size-only (no data: shapes and timing only) the simulated step time and what a rank sent.
"""
import argparse
import time

import numpy as np

import simcomm
from simcomm.parallel.model.config import TransformerConfig, model_preset
from simcomm.parallel.parallelize import train
from simcomm.parallel.results import full_params, global_losses
from simcomm.parallel.serial import train_serial
from simcomm.parallel.train_config import TrainConfig


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for axis in ("tp", "pp", "cp", "dp"):
        p.add_argument(f"--{axis}", type=int, default=1)
    p.add_argument("--vp", type=int, default=1, help="model chunks per pipeline rank (interleaved 1F1B)")
    p.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved_1f1b"])
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--data-parallel", default="ddp", choices=["ddp", "zero1", "zero2", "zero3"])
    p.add_argument("--overlap", action="store_true", help="overlap gradient reduction with backward")
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=0)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--preset", help="a model preset (e.g. gpt3-1.3b) instead of the tiny default")
    p.add_argument("--size-only", action="store_true")
    p.add_argument("--cluster", default="hgx-h100")
    a = p.parse_args()
    model = model_preset(a.preset) if a.preset else TransformerConfig(
        num_layers=4, hidden_size=32, num_attention_heads=4, seq_length=16, padded_vocab_size=64)
    cfg = TrainConfig(model, tensor_model_parallel_size=a.tp, pipeline_model_parallel_size=a.pp,
                      context_parallel_size=a.cp, data_parallel_size=a.dp,
                      virtual_pipeline_model_parallel_size=a.vp, pipeline_schedule=a.schedule,
                      sequence_parallel=a.sequence_parallel, data_parallel=a.data_parallel,
                      overlap_grad_reduce=a.overlap, global_batch_size=a.global_batch, micro_batch_size=a.micro_batch,
                      train_iters=1 if a.size_only else a.steps, optimizer_args={"lr": a.lr},
                      size_only=a.size_only, params_dtype="bfloat16" if a.size_only else "float64")
    wall = time.perf_counter()
    res = simcomm.spawn(train, args=(cfg,), nprocs=cfg.world_size, cluster=a.cluster,
                        detail="steps" if cfg.world_size > 64 else "flows")
    wall = time.perf_counter() - wall
    print(f"{cfg.dims.describe()}, {cfg.num_microbatches} microbatches of {cfg.micro_batch_size_or_default}, "
          f"{cfg.pipeline_schedule}, {cfg.data_parallel}: simulated step(s) {res.elapsed * 1e3:.3f} ms "
          f"in {wall:.1f} s wall")
    state = res.results[0]["state_bytes"]
    print("rank 0 keeps " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in state.items()))
    if a.size_only:
        return
    ref, ref_losses = train_serial(model, cfg.make_optimizer(), cfg.train_iters, cfg.global_batch_size)
    for step, (got, want) in enumerate(zip(global_losses(res.results, cfg), ref_losses)):
        print(f"step {step}: loss {got:.12f}   serial {want:.12f}")
    params = full_params(res.results, cfg)
    worst = max(float(np.abs(params[n] - ref[n]).max()) for n in ref)
    print(f"largest weight difference from serial training: {worst:.3g}")


if __name__ == "__main__":
    main()
