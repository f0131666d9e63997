"""What an unbalanced router costs: Mixtral 8x7B on 64 H100s (the layout of scenarios/mixtral-8x7b-h100-64.yaml)
with perfectly balanced routing and Zipf-skewed routing (moe_routing_skew: expert i gets a share proportional to
(i + 1)^-skew). Prints the table of docs/training.md's MoE section (--markdown) or plain lines.

    python examples/training/moe_imbalance.py [--markdown] [SKEW ...]
"""
import sys

from simcomm.errors import OutOfMemoryError
from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset


def step(skew: float):
    config = TrainingConfig(global_batch_size=256, micro_batch_size=1, pipeline_model_parallel_size=4,
                            expert_model_parallel_size=8, moe_grouped_gemm=True, use_distributed_optimizer=True,
                            overlap_grad_reduce=True, overlap_param_gather=True, moe_routing_skew=skew)
    layout = build_layout(model_preset("mixtral-8x7b"), config, 64)
    return StepModel(layout, build_cluster("hgx-h100", nodes=8)).run()


def main(argv) -> int:
    markdown = "--markdown" in argv
    skews = [float(x) for x in argv if not x.startswith("--")] or [0.0, 0.3, 0.6]
    if markdown:
        print("| routing | step (s) | MFU | expert compute (s) | imbalance (s) | EP exposed (ms) | peak memory |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
    for skew in skews:
        name = f"skew {skew:g}" if skew else "balanced"
        try:
            r = step(skew)
        except OutOfMemoryError as exc:
            print(f"| {name} | out of memory: {exc} |" if markdown else f"{name}: {exc}")
            continue
        m = r.moe["mean"]
        cells = (name, f"{r.step_time:.2f}", f"{r.mfu:.1%}", f"{m['expert_compute']:.2f}", f"{m['imbalance']:.2f}",
                 f"{r.breakdown['ep'] * 1e3:.0f}", f"{r.peak_memory / 2**30:.1f} GiB")
        print("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
