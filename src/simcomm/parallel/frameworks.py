"""The frameworks that run a training layout: which layouts each one can run, and the arguments that ask it for one.

- megatron: Megatron-LM (Megatron-Core). DDP, or the distributed optimizer (ZeRO-1) with any TP, CP and pipeline
  (1F1B, interleaved 1F1B with virtual stages; it has no GPipe schedule). ZeRO-2 and ZeRO-3 only through
  Megatron-FSDP (`--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads | optim_grads_params`), which
  does not run with pipeline parallelism: the planner offers those with pp 1 only.
- torchtitan: FSDP2 shards parameters, gradients and optimizer state whenever data_parallel_shard_degree > 1
  (ZeRO-3; data_parallel_replicate_degree alone is DDP): no ZeRO-1 or ZeRO-2. TP, CP and PP (1F1B, GPipe,
  Interleaved1F1B) combine with FSDP2, pipeline stages included. Its toml keys, by section.
- deepspeed: Megatron-DeepSpeed (Megatron's model code, DeepSpeed's ZeRO and pipeline engine): ZeRO 0-3, but its
  pipeline engine runs ZeRO 0-1 only and one schedule (1F1B, no interleaving); no ring context parallelism
  (DeepSpeed-Ulysses is another scheme). Its command line and its ds_config JSON.

Each layout is described by its TrainingConfig (Megatron-LM's names) and Layout; `refusal` says why a framework
cannot run a layout (None when it can), `arguments` how to ask the framework for it.
"""
from __future__ import annotations

import json

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")
NAMES = {"megatron": "Megatron-LM", "torchtitan": "torchtitan", "deepspeed": "Megatron-DeepSpeed"}
SHARDING = {0: "no_shard", 1: "optim", 2: "optim_grads", 3: "optim_grads_params"}  # Megatron-FSDP's names


def refusal(framework: str | None, *, pp: int, cp: int, schedule: str, zero: int) -> str | None:
    """Why `framework` cannot run a layout of this pipeline size, context-parallel size, schedule ('1f1b',
    'gpipe', 'interleaved_1f1b') and ZeRO stage; None when it can. framework None ('any'): simcomm's own search
    space, every framework's layouts but ZeRO-3 with pipeline parallelism (as Megatron-LM and DeepSpeed)."""
    if framework is None:
        return "ZeRO-3 with pipeline parallelism (torchtitan only: --framework torchtitan)" if zero == 3 and pp > 1 \
            else None
    if framework == "megatron":
        if schedule == "gpipe" and pp > 1:
            return "Megatron-LM has no GPipe schedule"
        if schedule not in MEGATRON_SCHEDULES and pp > 1:
            return f"Megatron-LM's schedules are 1F1B and interleaved 1F1B, not {schedule}"
        if zero >= 2 and pp > 1:
            return f"ZeRO-{zero} is Megatron-FSDP in Megatron-LM, which does not run with pipeline parallelism"
        return None
    if framework == "torchtitan":
        if pp > 1 and schedule not in TITAN_SCHEDULES:
            return f"torch.distributed.pipelining has no {schedule} schedule"
        if zero in (1, 2):
            return f"torchtitan's FSDP2 shards parameters too (ZeRO-3) or replicates (DDP); it has no ZeRO-{zero}"
        return None
    if framework == "deepspeed":
        if cp > 1:
            return "DeepSpeed has no ring context parallelism"
        if pp > 1 and zero >= 2:
            return f"DeepSpeed's pipeline engine runs ZeRO stage 0 or 1, not {zero}"
        if pp > 1 and schedule != "1f1b":
            return "DeepSpeed's pipeline engine runs 1F1B only"
        return None
    raise ValueError(f"unknown framework {framework!r}; expected one of {', '.join(FRAMEWORKS)}")


def layout_refusal(framework: str | None, layout) -> str | None:
    """refusal() for a built Layout."""
    return refusal(framework, pp=layout.dims.pp, cp=layout.dims.cp, schedule=layout.schedule_name,
                   zero=layout.config.stage)


def runners(layout) -> list[str]:
    """The frameworks that can run `layout`."""
    return [f for f in FRAMEWORKS if layout_refusal(f, layout) is None]


def _recompute(layout) -> tuple[str | None, str | None, int | None]:
    """(granularity, method, layers) as Megatron-LM takes them: full recomputation of every layer is uniform with
    one layer per group."""
    c = layout.config
    if c.recompute_granularity != "full":
        return c.recompute_granularity, None, None
    return "full", c.recompute_method, c.recompute_num_layers or 1


def _precision(c) -> list[str]:
    out = ["--bf16"] if c.bf16 else ["--fp16"] if c.fp16 else []
    return out + ([f"--fp8-format {c.fp8_format}"] if c.fp8_format else [])


def megatron(layout) -> list[str]:
    """Megatron-LM's arguments (pretrain_gpt.py) for the layout's parallelism, batch, sharding and recomputation."""
    c, d = layout.config, layout.dims
    out = [f"--tensor-model-parallel-size {d.tp}", f"--pipeline-model-parallel-size {d.pp}"]
    if d.cp > 1:
        out.append(f"--context-parallel-size {d.cp}")
    if layout.chunks > 1:
        out.append(f"--num-layers-per-virtual-pipeline-stage {len(layout.stage_layers[0][0])}")
    if c.sequence_parallel and d.tp > 1:
        out.append("--sequence-parallel")
    out += [f"--micro-batch-size {c.micro_batch_size}", f"--global-batch-size {c.global_batch_size}"]
    for name in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        if getattr(c, name):
            out.append(f"--{name.replace('_', '-')} {getattr(c, name)}")
    if c.microbatch_group_size_per_vp_stage and layout.chunks > 1:
        out.append(f"--microbatch-group-size-per-virtual-pipeline-stage {c.microbatch_group_size_per_vp_stage}")
    for flag in ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"):
        if getattr(c, flag):
            out.append("--" + flag.replace("_", "-"))
    if c.stage >= 1:
        out.append("--use-distributed-optimizer")
    if c.stage >= 2:
        out += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {SHARDING[c.stage]}"]
    for flag, name in (("overlap_grad_reduce", "overlap-grad-reduce"), ("overlap_param_gather", "overlap-param-gather"),
                       ("tp_comm_overlap", "tp-comm-overlap"), ("overlap_p2p_comm", "overlap-p2p-communication")):
        if getattr(c, flag):
            out.append("--" + name)
    granularity, method, layers = _recompute(layout)
    if granularity:
        out.append(f"--recompute-granularity {granularity}")
    if method:
        out += [f"--recompute-method {method}", f"--recompute-num-layers {layers}"]
    return out + _precision(c)


# torch.distributed.pipelining's schedule classes (torchtitan's pipeline_parallel_schedule names them).
TITAN_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved_1f1b": "Interleaved1F1B", "looped_bfs": "LoopedBFS",
                   "interleaved_zb": "InterleavedZeroBubble", "zbv": "ZBVZeroBubble", "dualpipev": "DualPipeV"}
MEGATRON_SCHEDULES = ("1f1b", "interleaved_1f1b")


def torchtitan(layout) -> list[str]:
    """torchtitan's toml keys ([section] key = value) for the layout."""
    c, d = layout.config, layout.dims
    shard = d.dp if c.stage == 3 else 1
    par = [f"data_parallel_replicate_degree = {d.dp // shard}", f"data_parallel_shard_degree = {shard}",
           f"tensor_parallel_degree = {d.tp}", f"context_parallel_degree = {d.cp}",
           f"pipeline_parallel_degree = {d.pp}"]
    if d.pp > 1:
        par += [f'pipeline_parallel_schedule = "{TITAN_SCHEDULES[layout.schedule_name]}"',
                f"pipeline_parallel_microbatch_size = {c.micro_batch_size}"]
        if layout.chunks > 1:
            par.append(f"pipeline_parallel_layers_per_stage = {len(layout.stage_layers[0][0])}")
    local = c.global_batch_size // d.dp if d.pp > 1 else c.micro_batch_size  # without PP: gradient accumulation
    training = [f"global_batch_size = {c.global_batch_size}", f"local_batch_size = {local}"]
    if c.bf16:
        training.append('mixed_precision_param = "bfloat16"')
    mode = {None: "none", "selective": "selective", "full": "full"}[c.recompute_granularity]
    return (["[parallelism]"] + par + ["[training]"] + training + ["[activation_checkpoint]", f'mode = "{mode}"'])


def deepspeed(layout) -> list[str]:
    """Megatron-DeepSpeed's parallel arguments and the ds_config JSON (--deepspeed_config) for the layout."""
    c, d = layout.config, layout.dims
    args = [f"--tensor-model-parallel-size {d.tp}", f"--pipeline-model-parallel-size {d.pp}"]
    if c.sequence_parallel and d.tp > 1:
        args.append("--sequence-parallel")
    if d.pp == 1:
        args.append("--no-pipeline-parallel")
    granularity, method, layers = _recompute(layout)
    if granularity:
        args.append(f"--recompute-granularity {granularity}")
    if method:
        args += [f"--recompute-method {method}", f"--recompute-num-layers {layers}"]
    config = {"train_batch_size": c.global_batch_size, "train_micro_batch_size_per_gpu": c.micro_batch_size,
              "gradient_accumulation_steps": layout.microbatches,
              "zero_optimization": {"stage": c.stage, "overlap_comm": bool(c.overlap_grad_reduce)}}
    if c.bf16 or c.fp16:
        config["bf16" if c.bf16 else "fp16"] = {"enabled": True}
    return args + _precision(c) + ["ds_config: " + json.dumps(config, separators=(", ", ": "))]


ARGUMENTS = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}


def arguments(framework: str, layout) -> list[str]:
    """How to ask `framework` for `layout`: its command-line arguments (or toml lines, or JSON)."""
    return ARGUMENTS[framework](layout)


__all__ = ["FRAMEWORKS", "NAMES", "arguments", "layout_refusal", "refusal", "runners"]
