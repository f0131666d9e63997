"""`simcomm bench`: the simulator's own speed (wall seconds, peak memory, event counts), never asserted in unit tests.

Each case runs in a fresh process of its own (`--in-process` to run them here): its wall time is the case itself,
its peak memory the process's maximum resident set, interpreter and imports included.

Cases:
  flows-fattree   1,024 concurrent 64 MiB flows (a fixed random permutation) on a 128-node hgx-h100 fat-tree
  ring-N          a ring of neighbour sends on N ranks: 2(N-1) lockstep steps of 1 MiB (a ring all-reduce's traffic)
  allreduce-ALG-N a 1 GiB size-only all_reduce on N hgx-h100 GPUs (1,024 to 131,072) with ALG (Simple protocol):
                  ring, tree, recursive_doubling, halving_doubling, hierarchical, nvls_tree, or the tuner's own
                  choice (auto); targets (issue 22): every algorithm under 10 s wall and 2 GB on 131,072 GPUs, under
                  2 s (and 1 GB) on 16,384; under 1.5 s on 4,096 (issue 10)
  rankprog-N      a rank-program all_reduce of 4 MiB float32 with real data on N ranks (256, 1,024), checked
  rankprog-sizeonly-16384  the same with size-only tensors on 16,384 ranks; target: under 10 s wall
  spawn-cpu-host-N-scalar  a rank program all-reducing one float32 (the loss, a norm, a flag) on N ranks of one
                  cpu-host (1,024, 4,096; 16,384: four hosts of 4,096), checked: gloo's ring with uneven chunks
                  (issue 22)
  build-cpu-host-N  building a cpu-host cluster of N ranks on one host (1,024, 4,096): O(ranks)
  launch-cpu-host-4000  `simcomm launch --nproc-per-node 4000 --cluster cpu-host` of a torch.distributed script
                  (benchmarks/launch/allreduce.py: init, a 4 KiB all_reduce, checked); needs torch
  train-64        one training step of GPT-3 1.3B as rank programs on 64 H100s, tp 2 (sequence parallel) x pp 4
                  (1F1B, 8 microbatches) x dp 8 (DDP, overlapped buckets), size-only tensors
  train-data-16   three steps of a tiny GPT with real data on 16 ranks, tp 2 x cp 2 x pp 2 x dp 2 (ZeRO-1)
  step-gpt3-175b-1024     the step model (parallel/step_cost.py): scenarios/gpt3-175b-a100-1024.yaml
                          target (issue 9): under 2 s wall
  step-llama3-405b-16384  the step model: scenarios/llama3-405b-h100-16384.yaml; target: under 5 s wall
  step-llama3-405b-131072 the same layout with dp 1,024 (and 16,384 sequences) on 131,072 GPUs; target (issue
                          22): under 5 s wall
  step-llama3-405b-pp32-16384 the layout `simcomm plan` proves best for scenarios/llama3-405b-h100-16384.yaml
                          (tp 8, pp 32, cp 4, 1F1B, ZeRO-1): a deep pipeline, the steps the plan simulates most
  step-mixtral-8x7b-64    the step model: scenarios/mixtral-8x7b-h100-64.yaml (MoE, EP 8); target (issue 23):
                          under 10 s wall
  step-deepseek-v3-2048   the step model: scenarios/deepseek-v3-h800-2048.yaml (MoE, EP 64 over 8 nodes, PP 16);
                          target (issue 23): under 10 s wall
  plan-llama3-70b-1024    `simcomm plan` of scenarios/llama3-70b-h100-1024.yaml on 2 worker processes (its default
                          search space); target: at least 500 layouts in under 60 s wall on 2 cores
  plan-llama3-405b-16384  `simcomm plan` of scenarios/llama3-405b-h100-16384.yaml on 2 worker processes, every
                          layout of the default search space; target (issue 22): under 60 s wall on 2 cores
  perf-cli        `simcomm perf -b 8 -e 8G -f 2 -g 8` (nccl-tests' whole all_reduce table on 8 H100s) as a process of
                  its own, interpreter start and imports included; target: under 2 s wall
Cases with a target report it (`target`) and whether this run met it (`target_met`). Every row also gives the case's
CPU seconds (`cpu_seconds`: user and system, this process and the children it waited for), which a machine shared
with other work stretches far less than the wall time.

`simcomm bench smpi` compares with a peer: the same 4 MiB all-reduce program on SimGrid's SMPI (where smpirun and
smpicc are installed) and as a simcomm rank program, at 8, 64, 256, 1,024 and 4,096 ranks, run interleaved; it
prints both wall times, both memory peaks and their ratios, and beside them the program's floor: its numpy work
with nothing simulated, the least any simulator of it could take here (bench/smpi.py; the programs are in
benchmarks/smpi/).
Targets (issue 22): simcomm within 0.25x SMPI's wall at 1,024 ranks and 0.5x at 4,096, with no more memory.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from .process import run_process
from .folders import benchmark_folder

from ..engine import Simulation
from ..hardware import build_cluster
from ..units import format_size, whole, wholes

MiB = 1 << 20


def _cpu() -> float:
    """CPU seconds of this process (finely) and of the children it waited for (in clock ticks)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def _timed(fn) -> tuple[float, float, dict]:
    """(wall seconds, CPU seconds, what fn returned)."""
    t, c = time.perf_counter(), _cpu()
    info = fn()
    return time.perf_counter() - t, _cpu() - c, info


def bench_flows(nodes: int = 128, nbytes: int = 64 * MiB) -> dict:
    """All GPUs send at once to a random permutation of peers: contention, many distinct finish times."""
    cluster = build_cluster("hgx-h100", nodes=nodes, fabric="fat-tree")
    sim = Simulation(cluster, detail="steps")
    n = cluster.num_ranks
    rng = np.random.default_rng(2024)
    dst = rng.permutation(n)
    src = np.arange(n)
    keep = src != dst
    t = sim.network.transfer(src[keep], dst[keep], nbytes, label="permutation")
    sim.env.run(t.done)
    return {"ranks": n, "flows": int(keep.sum()), "sim_seconds": sim.now, **sim.stats()}


def bench_ring(ranks: int, nbytes: int = MiB) -> dict:
    """2(n-1) lockstep steps of neighbour sends r -> r+1 (hgx-h100 nodes, rail-optimised fabric)."""
    nodes = max(1, -(-ranks // 8))
    cluster = build_cluster("hgx-h100", nodes=nodes)
    sim = Simulation(cluster, detail="steps")
    src = np.arange(ranks)
    dst = (src + 1) % ranks

    def ring():
        for _ in range(2 * (ranks - 1)):
            yield sim.network.transfer(src, dst, nbytes, label="ring step").done

    sim.env.run(sim.env.process(ring()))
    return {"ranks": ranks, "steps": 2 * (ranks - 1), "sim_seconds": sim.now, **sim.stats()}


def bench_allreduce(nodes: int, algorithm: str | None, size: str = "1GiB") -> dict:
    """A size-only all_reduce on every GPU of `nodes` hgx-h100 nodes: `algorithm` with the Simple protocol, or
    the tuner's own choice of both (None)."""
    from ..collective import simulate_collective
    cluster = build_cluster("hgx-h100", nodes=nodes)
    r = simulate_collective("all_reduce", size, cluster=cluster, algorithm=algorithm,
                            protocol="Simple" if algorithm else None)
    return {"ranks": r.ranks, "algorithm": r.algorithm, "sim_seconds": r.time, "busbw_GBps": r.busbw / 1e9,
            **r.stats}


def bench_rank_program(ranks: int = 256, count: int = MiB, size_only: bool = False) -> dict:
    """Every rank calls all_reduce on `count` float32 (4 MiB) with real data, checked, or size-only."""
    from .. import distributed as dist
    from ..distributed.spawn import spawn
    from ..distributed.tensors import size_only as make_size_only

    def program(rank):
        x = make_size_only(count, dtype="float32") if size_only else np.full(count, rank, dtype=np.float32)
        dist.all_reduce(x)
        return None if size_only else float(x[0])

    r = spawn(program, nprocs=ranks, cluster="hgx-h100", detail="steps")  # spawn sizes the cluster to the ranks
    if not size_only:
        expect = ranks * (ranks - 1) / 2
        assert all(v == expect for v in r.results), "all_reduce gave a wrong sum"
    return {"ranks": ranks, "sim_seconds": r.elapsed, **r.stats()}


def bench_scalar(ranks: int) -> dict:
    """Every rank of cpu-hosts of up to 4,096 ranks all-reduces one float32 (gloo's ring: one chunk holds it, the
    others are empty)."""
    from .. import distributed as dist
    from ..distributed.spawn import spawn

    def program(rank):
        x = np.ones(1, dtype=np.float32)
        dist.all_reduce(x)
        return float(x[0])

    per_host = min(ranks, 4096)  # spawn's most on one host
    cluster = build_cluster("cpu-host", nodes=ranks // per_host, ranks_per_node=per_host)
    r = spawn(program, nprocs=ranks, cluster=cluster)
    assert all(v == ranks for v in r.results), "all_reduce gave a wrong sum"
    return {"ranks": ranks, "sim_seconds": r.elapsed, **r.stats()}


def bench_build(ranks: int) -> dict:
    """Build a cpu-host cluster of `ranks` CPU processes on one host and route its ring (the rank program's first
    collective needs it)."""
    cluster = build_cluster("cpu-host", ranks_per_node=ranks)
    local = np.arange(ranks)
    routes = cluster.route_ids(local, (local + 1) % ranks)
    return {"ranks": cluster.num_ranks, "links": cluster.num_links, "routes": len(np.unique(routes)),
            "sim_seconds": 0.0}


def bench_launch(ranks: int) -> dict:
    """`simcomm launch --nproc-per-node RANKS --cluster cpu-host` of benchmarks/launch/allreduce.py."""
    from ..backends import require_torch
    from ..backends.launch import launch
    require_torch()
    script = benchmark_folder("launch", "allreduce.py") / "allreduce.py"
    result = launch(str(script), [], ranks, None, "cpu-host")
    world = result.worlds[0]
    if not result.ok or world.elapsed is None:
        raise RuntimeError(f"the launched script failed: {world.error}")
    return {"ranks": world.nprocs, "sim_seconds": world.elapsed, **world.result.stats()}


def bench_training(size_only: bool = True) -> dict:
    """The numeric training rank program (parallel/numeric_training.py) at scale without data, or small with
    data."""
    from ..distributed.spawn import spawn
    from ..parallel import TrainingConfig, build_layout
    from ..parallel.model.config import TransformerConfig, model_preset
    from ..parallel.numeric_training import train
    if size_only:
        layout = build_layout(model_preset("gpt3-1.3b"), TrainingConfig(
            tensor_model_parallel_size=2, sequence_parallel=True, pipeline_model_parallel_size=4, global_batch_size=64,
            micro_batch_size=1, overlap_grad_reduce=True, size_only=True, params_dtype="bfloat16"), 64)
    else:
        tiny = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4, seq_length=8,
                                 padded_vocab_size=32)
        layout = build_layout(tiny, TrainingConfig(
            tensor_model_parallel_size=2, context_parallel_size=2, pipeline_model_parallel_size=2,
            global_batch_size=8, micro_batch_size=2, use_distributed_optimizer=True, train_iters=3), 16)
    r = spawn(train, args=(layout,), nprocs=layout.world_size, detail="steps")
    colls = sum(1 for a in r.timeline if a.kind == "collective")
    return {"ranks": layout.world_size, "layout": layout.dims.describe(), "rank_collectives": colls,
            "sim_seconds": r.elapsed, **r.stats()}


# The step-model cases' settings, as their scenario files give them (tests/test_bench.py checks they agree).
STEP_CASES = {
    "step-gpt3-175b-1024": ("dgx-a100", 128, "gpt3-175b", dict(
        tensor_model_parallel_size=8, pipeline_model_parallel_size=8, num_layers_per_virtual_pipeline_stage=6,
        micro_batch_size=1, global_batch_size=1536, recompute_granularity="full", bf16=False, fp16=True,
        use_flash_attn=False, flops_formula="narayanan")),
    "step-llama3-405b-16384": ("hgx-h100", 2048, "llama3-405b", dict(
        tensor_model_parallel_size=8, pipeline_model_parallel_size=16, num_layers_per_virtual_pipeline_stage=4,
        account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True,
        sequence_parallel=True, micro_batch_size=1, global_batch_size=2048, recompute_granularity="full",
        recompute_method="block", recompute_num_layers=1, use_distributed_optimizer=True, overlap_grad_reduce=True,
        overlap_param_gather=True)),
    "step-mixtral-8x7b-64": ("hgx-h100", 8, "mixtral-8x7b", dict(
        pipeline_model_parallel_size=4, expert_model_parallel_size=8, moe_grouped_gemm=True, micro_batch_size=1,
        global_batch_size=256, use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)),
    "step-deepseek-v3-2048": ("hgx-h800", 256, "deepseek-v3", dict(
        pipeline_model_parallel_size=16, pipeline_schedule="dualpipe", decoder_first_pipeline_num_layers=1,
        expert_model_parallel_size=64, moe_grouped_gemm=True, moe_token_dispatcher_type="flex", moe_dispatch_fp8=True,
        moe_shared_expert_overlap=True, fp8_format="e4m3", recompute_granularity="full", micro_batch_size=1,
        global_batch_size=15360, use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True)),
    "plan-llama3-70b-1024": ("hgx-h100", 128, "llama3-70b", dict(
        tensor_model_parallel_size=8, pipeline_model_parallel_size=4, num_layers_per_virtual_pipeline_stage=4,
        sequence_parallel=True, micro_batch_size=1, global_batch_size=1024, use_distributed_optimizer=True,
        overlap_grad_reduce=True, overlap_param_gather=True)),
}


def bench_step(case: str) -> dict:
    """One training step of a scenario's layout with the step model (cluster built inside the timing)."""
    from ..parallel import StepModel, TrainingConfig, build_layout, model_preset
    preset, nodes, model, settings = STEP_CASES[case]
    cluster = build_cluster(preset, nodes=nodes)
    sim = StepModel(build_layout(model_preset(model), TrainingConfig(**settings), cluster.num_ranks), cluster)
    res = sim.run()
    return {"ranks": cluster.num_ranks, "sim_seconds": res.step_time, "mfu": res.mfu, **res.simulation.stats(),
            "collectives": res.traffic}


def bench_plan(case: str, jobs: int = 2) -> dict:
    """`simcomm plan` of a scenario on `jobs` local processes: layouts tried, fitting, simulated."""
    from ..parallel import TrainingConfig, model_preset
    from ..parallel.search import plan
    preset, nodes, model, settings = STEP_CASES[case]
    cluster = build_cluster(preset, nodes=nodes)
    res = plan(model_preset(model), TrainingConfig(**settings), cluster, jobs=jobs)
    best = next(r for r in res.rows if "step_time" in r)
    return {"ranks": cluster.num_ranks, "layouts": res.enumerated, "fit": len(res.feasible),
            "passes_bounds": res.passes_bounds, "schedule_bounds": res.schedule_bounds, "simulated": res.simulated,
            "proven": res.proven,
            "best": best["layout"], "sim_seconds": best["step_time"]}


def bench_perf_cli() -> dict:
    """nccl-tests' command line as users type it, in a process of its own: the rows it printed."""
    argv = ["perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"]
    done = run_process([sys.executable, "-m", "simcomm", *argv], timeout=600)
    if done.returncode:
        raise RuntimeError(f"simcomm {' '.join(argv)}: {done.failure}")
    table = [line.split() for line in done.out.splitlines() if line.strip() and not line.startswith("#")]
    return {"sizes": len(table), "sim_seconds": float(table[-1][5]) * 1e-6}  # the largest size's time (us)


# The 16,384-GPU 405B layout searched (its scenario's), and stepped with dp 1,024 on 131,072 GPUs (16 sequences per
# data-parallel group, as on 16,384).
STEP_CASES["plan-llama3-405b-16384"] = STEP_CASES["step-llama3-405b-16384"]
STEP_CASES["step-llama3-405b-131072"] = ("hgx-h100", 16384, "llama3-405b",
                                         {**STEP_CASES["step-llama3-405b-16384"][3], "global_batch_size": 16384})
# The layout that plan proves best for that scenario (tp 8, pp 32, cp 4, 1F1B, ZeRO-1, no recomputation): a deep
# pipeline of 128 micro-batches, 8,192 passes, the kind of step the plan simulates most.
STEP_CASES["step-llama3-405b-pp32-16384"] = ("hgx-h100", 2048, "llama3-405b", {
    **STEP_CASES["step-llama3-405b-16384"][3], "pipeline_model_parallel_size": 32, "context_parallel_size": 4,
    "num_layers_per_virtual_pipeline_stage": None, "pipeline_schedule": "1f1b", "zero_stage": 1,
    "recompute_granularity": None, "recompute_method": "uniform", "recompute_num_layers": None})

ALGORITHMS = ("ring", "tree", "recursive_doubling", "halving_doubling", "hierarchical", "nvls_tree", None)
CASES = {
    "flows-fattree": lambda: bench_flows(),
    **{f"ring-{n}": (lambda n=n: bench_ring(n)) for n in (8, 64, 512, 1024, 4096)},
    "allreduce-ring-1024": lambda: bench_allreduce(128, "ring"),
    "allreduce-hierarchical-1024": lambda: bench_allreduce(128, "hierarchical"),
    **{f"allreduce-{alg or 'auto'}-{8 * nodes}": (lambda nodes=nodes, alg=alg: bench_allreduce(nodes, alg))
       for nodes in (512, 2048, 16384) for alg in ALGORITHMS},
    "rankprog-256": lambda: bench_rank_program(),
    "rankprog-1024": lambda: bench_rank_program(1024),
    "rankprog-sizeonly-16384": lambda: bench_rank_program(16384, size_only=True),
    **{f"spawn-cpu-host-{n}-scalar": (lambda n=n: bench_scalar(n)) for n in (1024, 4096, 16384)},
    **{f"build-cpu-host-{n}": (lambda n=n: bench_build(n)) for n in (1024, 4096)},
    "launch-cpu-host-4000": lambda: bench_launch(4000),
    "train-64": lambda: bench_training(size_only=True),
    "train-data-16": lambda: bench_training(size_only=False),
    **{case: (lambda case=case: bench_step(case)) for case in STEP_CASES if case.startswith("step-")},
    **{case: (lambda case=case: bench_plan(case)) for case in STEP_CASES if case.startswith("plan-")},
    "perf-cli": bench_perf_cli,
}
DEFAULT = ["flows-fattree", "ring-8", "ring-64", "ring-512", "ring-1024", "allreduce-ring-1024",
           "allreduce-hierarchical-1024", "allreduce-ring-4096", "allreduce-tree-4096",
           "allreduce-hierarchical-4096", "allreduce-auto-4096",
           *[f"allreduce-{alg or 'auto'}-{n}" for n in (16384, 131072) for alg in ALGORITHMS],
           "rankprog-256", "rankprog-sizeonly-16384", "spawn-cpu-host-4096-scalar", "spawn-cpu-host-16384-scalar",
           "build-cpu-host-4096", "launch-cpu-host-4000", "train-64",
           "step-gpt3-175b-1024", "step-llama3-405b-16384", "step-llama3-405b-pp32-16384", "step-llama3-405b-131072",
           "step-mixtral-8x7b-64",
           "step-deepseek-v3-2048", "plan-llama3-70b-1024",
           "plan-llama3-405b-16384", "perf-cli"]


# The issues' speed targets: (what, whether a row meets it). Reported, never asserted in unit tests.
SMPI_TARGETS = {1024: 0.25, 4096: 0.5}  # bench smpi: simcomm's wall at most this times SMPI's, memory at most 1x
TARGETS = {
    **{f"allreduce-{alg}-4096": ("< 1.5 s wall", lambda r: r["wall_seconds"] < 1.5)
       for alg in ("ring", "tree", "hierarchical", "auto")},
    **{f"allreduce-{alg or 'auto'}-16384": ("< 2 s wall, < 1 GB",
                                            lambda r: r["wall_seconds"] < 2 and r.get("peak_mb", 0) < 1000)
       for alg in ALGORITHMS},
    **{f"allreduce-{alg or 'auto'}-131072": ("< 10 s wall, < 2 GB",
                                             lambda r: r["wall_seconds"] < 10 and r.get("peak_mb", 0) < 2000)
       for alg in ALGORITHMS},
    "rankprog-sizeonly-16384": ("< 10 s wall", lambda r: r["wall_seconds"] < 10),
    "step-gpt3-175b-1024": ("< 2 s wall", lambda r: r["wall_seconds"] < 2),
    "step-llama3-405b-16384": ("< 5 s wall", lambda r: r["wall_seconds"] < 5),
    "step-llama3-405b-131072": ("< 5 s wall", lambda r: r["wall_seconds"] < 5),
    "step-mixtral-8x7b-64": ("< 10 s wall", lambda r: r["wall_seconds"] < 10),
    "step-deepseek-v3-2048": ("< 10 s wall", lambda r: r["wall_seconds"] < 10),
    "plan-llama3-70b-1024": (">= 500 layouts, < 60 s wall on 2 cores",
                             lambda r: r["layouts"] >= 500 and r["wall_seconds"] < 60),
    "plan-llama3-405b-16384": ("< 60 s wall on 2 cores", lambda r: r["wall_seconds"] < 60),
    "perf-cli": ("31 sizes, < 2 s wall with interpreter start", lambda r: r["sizes"] == 31 and r["wall_seconds"] < 2),
}


def run(cases: list[str], isolated: bool = False, repeats: int = 1) -> list[dict]:
    """One row per case: wall seconds and what the case reports; isolated: each case in a fresh process of its own
    (no caches or memory carried over), with its peak memory (`peak_mb`, the process's maximum resident set).
    repeats > 1: the case runs that many times and the row gives the medians of wall, CPU and peak memory (the
    rest from the run of median wall time), with every run's wall time (`wall_runs`)."""
    rows = []
    for name in cases:
        runs = [_run_once(name, isolated) for _ in range(repeats)]
        good = [r for r in runs if "error" not in r] or runs[-1:]
        row = dict(sorted(good, key=lambda r: r["wall_seconds"])[(len(good) - 1) // 2])
        if repeats > 1 and "error" not in row:
            for key in ("wall_seconds", "cpu_seconds", "peak_mb"):
                if all(key in r for r in good):
                    row[key] = statistics.median(r[key] for r in good)
            row["wall_runs"] = [r["wall_seconds"] for r in runs]
        if name in TARGETS and "error" not in row:
            what, met = TARGETS[name]
            row.update(target=what, target_met=bool(met(row)))
        rows.append(row)
    return rows


def _run_once(name: str, isolated: bool) -> dict:
    if isolated:
        return _run_isolated(name)
    wall, cpu, info = _timed(CASES[name])
    return {"case": name, "wall_seconds": wall, "cpu_seconds": cpu, **info}


def _run_isolated(name: str) -> dict:
    done = run_process([sys.executable, "-m", "simcomm", "bench", name, "--json", "--in-process"], timeout=1800)
    try:
        row = json.loads(done.out)[0]
    except (ValueError, IndexError):
        return {"case": name, "wall_seconds": done.wall_seconds, "sim_seconds": float("nan"), "error": done.failure}
    row["peak_mb"] = done.peak_mb
    return row


def _print_row(row: dict) -> None:
    if "error" in row:
        print(f"{row['case']:<30} failed: {row['error']}", flush=True)
        return
    peak = f"{row['peak_mb']:>8.0f}" if "peak_mb" in row else f"{'':>8}"
    print(f"{row['case']:<30} {row['wall_seconds']:>8.3f} {row.get('cpu_seconds', float('nan')):>7.3f} {peak} "
          f"{row.get('events', 0):>9} "
          f"{row.get('flows', 0):>11} {row.get('solves', 0):>7} {row['sim_seconds'] * 1e3:>9.3f} ms"
          + (f"  {row['target']}: {'met' if row['target_met'] else 'NOT MET'}" if "target" in row else ""),
          flush=True)


def _peers(args) -> int:
    """`simcomm bench smpi`: the peer comparison with SimGrid's SMPI (bench/smpi.py)."""
    from . import smpi
    try:
        rows = smpi.compare(args.ranks, args.repeats,
                            progress=None if args.json else (lambda m: print(f"  {m}", file=sys.stderr, flush=True)))
    except FileNotFoundError as exc:
        print(f"simcomm bench smpi: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'ranks':>6} {'per rank':>9} {'simcomm s':>10} {'SMPI s':>8} {'ratio':>6} {'cpu ratio':>9} "
          f"{'simcomm MB':>11} {'SMPI MB':>8} {'ratio':>6} {'floor s':>8} {'ratio':>6} {'cpu ratio':>9}  "
          "simulated us (simcomm / SMPI)  target")
    for r in rows:
        size = format_size(r["bytes_per_rank"])
        if "wall_ratio" not in r:
            print(f"{r['ranks']:>6} {size:>9}  failed: {r.get('simcomm_error') or r.get('smpi_error')}")
            continue
        target = SMPI_TARGETS.get(r["ranks"])
        ok = target is not None and r["wall_ratio"] <= target and r["memory_ratio"] <= 1
        met = "" if target is None else f"  <= {target}x wall, <= 1x memory: {'met' if ok else 'NOT MET'}"
        print(f"{r['ranks']:>6} {size:>9} {r['simcomm_wall_seconds']:>10.2f} {r['smpi_wall_seconds']:>8.2f} "
              f"{r['wall_ratio']:>6.2f} {r['cpu_ratio']:>9.2f} {r['simcomm_peak_mb']:>11.0f} {r['smpi_peak_mb']:>8.0f} "
              f"{r['memory_ratio']:>6.2f} {_floor(r)}  {r['simcomm_simulated_us']:.1f} / {r['smpi_simulated_us']:.1f}"
              f"{met}")
    return 0


def _floor(r: dict) -> str:
    """The floor's columns: its wall seconds and its wall and CPU ratios to SMPI (blank if it failed)."""
    if "floor_wall_ratio" not in r:
        return f"{'failed':>8} {'':>6} {'':>9}"
    return f"{r['floor_wall_seconds']:>8.2f} {r['floor_wall_ratio']:>6.2f} {r['floor_cpu_ratio']:>9.2f}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="simcomm bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="*", help=f"cases to run (default: {' '.join(DEFAULT)}; 'all' for every case; "
                                            "'smpi' for the peer comparison with SimGrid)")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    p.add_argument("--in-process", action="store_true",
                   help="run the cases in this process (default: each in a fresh process, with its peak memory)")
    p.add_argument("--ranks", type=wholes(2, 16384), default=(8, 64, 256, 1024, 4096),
                   help="smpi: rank counts, comma-separated (default 8,64,256,1024,4096)")
    p.add_argument("--repeats", type=whole(1, 100), default=None,
                   help="runs of each case, each in a fresh process, reported by their medians (default 1); smpi: "
                        "interleaved runs per side and rank count (default 3)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.cases == ["smpi"]:
        args.repeats = args.repeats or 3
        return _peers(args)
    cases = list(CASES) if args.cases == ["all"] else (args.cases or DEFAULT)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"simcomm bench: unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)} (or smpi)",
              file=sys.stderr)
        return 2
    rows = []
    if not args.json:
        print(f"{'case':<30} {'wall s':>8} {'cpu s':>7} {'peak MB':>8} {'events':>9} {'flows':>11} {'solves':>7} "
              f"{'sim time':>12}"
              "  target")
    for name in cases:
        row = run([name], isolated=not args.in_process, repeats=args.repeats or 1)[0]
        rows.append(row)
        if not args.json:
            _print_row(row)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
