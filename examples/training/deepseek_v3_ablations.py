"""DeepSeek-V3 on 2,048 H800s (scenarios/deepseek-v3-h800-2048.yaml) with each overlap mechanism on and off,
beside the published cost (DeepSeek-V3 report, arXiv 2412.19437: 180K H800 GPU hours per trillion tokens).
Prints the table of docs/training.md's MoE section (--markdown) or plain lines.

Each row adds one mechanism to the row above: 1F1B with Megatron's alltoall dispatcher; DualPipe with its
forward-and-backward pairs run in turn; the pairs interleaved; DeepEP's node-limited dispatch; FP8 dispatch; the
shared expert beside the exchanges (the scenario); then selective recomputation of the norms, MLA's up
projections and the experts' activation instead of full recomputation (DeepSeek's choice; its memory is not
checked: without DeepSeek's FP8 activation caching it does not fit, and the row says how much it needs).

    python examples/training/deepseek_v3_ablations.py [--markdown]
"""
import sys

from simcomm.hardware import build_cluster
from simcomm.parallel import StepModel, TrainingConfig, build_layout, model_preset

PUBLISHED = 180e3  # H800 GPU hours per trillion tokens
BASE = dict(pipeline_model_parallel_size=16, decoder_first_pipeline_num_layers=1, expert_model_parallel_size=64,
            moe_grouped_gemm=True, fp8_format="e4m3", recompute_granularity="full", micro_batch_size=1,
            global_batch_size=15360, use_distributed_optimizer=True, overlap_grad_reduce=True,
            overlap_param_gather=True)
ROWS = (
    ("1F1B, alltoall dispatcher", dict(pipeline_schedule="1f1b")),
    ("DualPipe, pairs in turn", dict(pipeline_schedule="dualpipe", overlap_moe_expert_parallel_comm=False)),
    ("+ F&B pairs interleaved", dict(overlap_moe_expert_parallel_comm=None)),
    ("+ DeepEP (flex), BF16 dispatch", dict(moe_token_dispatcher_type="flex")),
    ("+ FP8 dispatch", dict(moe_dispatch_fp8=True)),
    ("+ shared expert overlap (the scenario)", dict(moe_shared_expert_overlap=True)),
    ("+ selective recompute (norms, MLA up-proj, SwiGLU)", dict(recompute_granularity="selective",
                                                              recompute_modules=("layernorm", "mla_up_proj",
                                                                                 "moe_act"))),
)


def rows():
    """(name, StepResult, whether the memory fits) for each row, settings accumulating."""
    settings = dict(BASE)
    cluster = build_cluster("hgx-h800", nodes=256)
    for name, change in ROWS:
        settings.update(change)
        layout = build_layout(model_preset("deepseek-v3"), TrainingConfig(**settings), cluster.num_ranks)
        model = StepModel(layout, cluster, check_memory=False)
        fits = all(m.fits for m in model.memory())
        yield name, model.run(), fits


def gpu_hours_per_trillion(r) -> float:
    return r.step_time * r.world / r.tokens * 1e12 / 3600


def main(argv) -> int:
    markdown = "--markdown" in argv
    head = ("layout", "step (s)", "MFU", "EP exposed (s)", "bubble (s)", "interference (s)",
            "GPU hours / T tokens", "x published", "peak memory")
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("| " + " | ".join("---" for _ in head) + " |")
    for name, r, fits in rows():
        hours = gpu_hours_per_trillion(r)
        b = r.breakdown
        memory = f"{r.peak_memory / 2**30:.0f} GiB" + ("" if fits else " (does not fit)")
        cells = (name, f"{r.step_time:.1f}", f"{r.mfu:.1%}", f"{b['ep']:.1f}", f"{b['bubble']:.1f}",
                 f"{b['interference']:.2f}", f"{hours / 1e3:.0f}K", f"{hours / PUBLISHED:.2f}", memory)
        print("| " + " | ".join(cells) + " |" if markdown else "  ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
