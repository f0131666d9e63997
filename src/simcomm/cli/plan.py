"""`simcomm plan SCENARIO`: every layout of a training scenario's model on its cluster, best first."""
from __future__ import annotations

import sys

from ..errors import SimcommError
from ..units import whole, wholes
from ..vocab import MAX_RANKS
from .options import JOBS
from .progress import with_progress

EXIT_OK = 0


def _choices(text: str | None, allowed: dict, what: str):
    if text is None:
        return None
    out = []
    for x in text.split(","):
        key = x.strip().lower()
        if key not in allowed:
            raise SimcommError(f"unknown {what} {x!r}; expected some of {', '.join(allowed)}")
        out.append(allowed[key])
    return tuple(out)


def _space(args):
    from ..parallel.pipeline_parallel.schedules import SCHEDULES
    from ..parallel.search import SearchSpace
    default = SearchSpace()
    given = {"tp": args.tp, "pp": args.pp, "cp": args.cp, "micro_batch_size": args.mbs, "zero": args.zero,
             "ep": args.ep, "etp": args.etp,
             "schedules": _choices(args.schedules, {"interleaved": "interleaved_1f1b", **{n: n for n in SCHEDULES}},
                                   "schedule"),
             "recompute": _choices(args.recompute, {"none": None, "selective": "selective", "full": "full"},
                                   "recomputation")}
    return SearchSpace(**{k: v for k, v in given.items() if v is not None}, max_virtual=args.max_virtual or
                       default.max_virtual, framework=None if args.framework == "any" else args.framework)


def _base(args, spec, cluster):
    """The scenario's training config, on --world-size GPUs when given."""
    from dataclasses import replace

    from ..parallel.search import world_of
    from ..workloads.training import config_of
    base = config_of(spec)
    if args.world_size is not None:
        if not 1 <= args.world_size <= cluster.num_ranks:
            raise SimcommError(f"--world-size {args.world_size}: expected 1 to the {cluster.num_ranks} GPUs of "
                               f"{cluster.name}")
        base = replace(base, world_size=args.world_size)
    try:
        world_of(base, cluster)
    except SimcommError as exc:
        raise SimcommError(f"{args.scenario}: {exc}") from None
    return base


def cmd_plan(args) -> int:
    from ..parallel.dims import LayoutError
    from ..parallel.search import plan
    from ..report import dumps
    from ..report.table import render
    from ..scenario import NO_INTERFERENCE, load_scenario
    from ..units import format_size
    from ..workloads.training import model_of
    from .plan_table import how_to_run, plan_blocks
    loaded = load_scenario(args.scenario, NO_INTERFERENCE if args.no_interference else None)
    spec = loaded.scenario.workload
    if spec.kind != "training":
        raise SimcommError(f"{args.scenario}: simcomm plan needs a training scenario (workload kind training), "
                           f"found kind {spec.kind}")
    model, cluster = model_of(spec), loaded.cluster
    if args.simulate > args.max_simulate:
        raise SimcommError(f"--simulate {args.simulate} is more than --max-simulate {args.max_simulate}")
    base = _base(args, spec, cluster)
    space = _space(args)
    alone = 0 if args.no_overlap_check or args.no_interference else args.top
    try:
        result = with_progress("planning", lambda update: plan(
            model, base, cluster, space, args.jobs, args.simulate, args.max_simulate, update, args.ray is not None,
            args.ray or None, own=True, alone=alone))
    except LayoutError as exc:  # a field of the scenario that no layout can satisfy
        field = getattr(exc, "field", None)
        raise SimcommError(f"{args.scenario}: " + (f"workload.{field}: " if field else "") + str(exc)) from None
    rows = result.rows
    valid = [r for r in rows if "error" not in r or "step_time" in r]
    fits = result.feasible
    summary = {"scenario": loaded.name, "model": model.name, "gpus": base.world_size or cluster.num_ranks,
               "cluster": cluster.name, "framework": args.framework, "own": result.own,
               "global_batch_size": base.global_batch_size, "enumerated": result.enumerated, "valid": len(valid),
               "fit_in_memory": len(fits), "passes_bounds": result.passes_bounds,
               "schedule_bounds": result.schedule_bounds, "simulated": result.simulated,
               "best_is_proven": result.proven}
    if args.plot:
        from ..report.training_plots import plot_plan
        plot_plan(fits, args.plot, f"{loaded.name}: {len(fits)} layouts that fit ({result.simulated} simulated)")
    if args.json:  # the printed rows and the scenario's own layout with their framework's arguments
        for r in fits[:args.top] + ([result.own] if result.own and "fits" in result.own else []):
            r["run"] = how_to_run(r, space.framework, model, base, cluster)
        sys.stdout.write(dumps({**summary, "rows": rows}))
        return EXIT_OK
    head = (f"plan for {model.name or 'the model'} on {base.world_size or cluster.num_ranks} GPUs ({cluster.name}), "
            f"global batch "
            f"{base.global_batch_size} x {model.seq_length} tokens: {result.enumerated} layouts tried, "
            f"{len(valid)} valid, {len(fits)} fit in memory, {result.passes_bounds} bounded by their real passes and "
            f"{result.schedule_bounds} by their schedule, "
            f"{result.simulated} simulated in full; "
            + ("the best is proven best (every other layout's lower bound is above it)" if result.proven else
               "raise --max-simulate to prove the best"))
    blocks = [head, *plan_blocks(result, args.top, space.framework, model, base, cluster)]
    if not fits:
        worst = min((r for r in rows if "peak_memory" in r), key=lambda r: r["peak_memory"], default=None)
        if worst is not None:
            blocks.append(f"no layout fits: the leanest, {worst['layout']}, needs {format_size(worst['peak_memory'])}"
                          f" of {format_size(worst['capacity'])} per GPU")
    if args.plot:
        blocks.append(f"wrote plot: {args.plot}")
    sys.stdout.write(render(blocks, rich=hasattr(sys.stdout, "isatty") and sys.stdout.isatty()) + "\n")
    return EXIT_OK


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="rank every parallel layout of a training scenario by predicted step time",
                       description="Every valid (tp, pp, cp, dp, micro-batch, schedule, virtual stages, ZeRO stage, "
                                   "recomputation) of the scenario's model on its cluster at its global batch; the "
                                   "layouts that fit in memory ranked by predicted step time (the best ones "
                                   "simulated in full, the rest by a lower bound).")
    p.add_argument("scenario", help="a training scenario (its workload gives the model, batch and fixed settings)")
    p.add_argument("--jobs", type=JOBS, help="local worker processes, 1 to this host's cores (default: every core)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="search on a Ray cluster instead of local processes (needs simcomm[ray]); ADDRESS defaults "
                        "to a local one; same result as local workers")
    p.add_argument("--framework", choices=("megatron", "torchtitan", "deepspeed", "any"), default="any",
                   help="only the layouts this framework runs, each row with its arguments (megatron: Megatron-LM, "
                        "ZeRO-2/3 as Megatron-FSDP without pipeline parallelism; torchtitan: FSDP2, i.e. ZeRO-3 or "
                        "DDP; deepspeed: Megatron-DeepSpeed; default any: every layout, each with the first "
                        "framework that runs it)")
    p.add_argument("--world-size", type=whole(1, MAX_RANKS),
                   help="GPUs to lay out, 1 to the cluster's (default: the scenario's world_size, else every GPU of "
                        "its cluster)")
    p.add_argument("--top", type=whole(1), default=20, help="rows to print (default 20)")
    p.add_argument("--simulate", type=whole(0), default=16, help="simulate at least this many layouts in full")
    p.add_argument("--max-simulate", type=whole(1), default=64, help="and at most this many (default 64)")
    p.add_argument("--tp", type=wholes(1, MAX_RANKS),
                   help="tensor-parallel sizes to try, e.g. 4,8 (default: divisors of a node's GPUs)")
    p.add_argument("--pp", type=wholes(1, MAX_RANKS), help="pipeline sizes (default: every divisor that fits)")
    p.add_argument("--ep", type=wholes(1, MAX_RANKS), help="expert-parallel sizes, MoE models (default: every "
                   "divisor of the experts that divides a stage's GPUs)")
    p.add_argument("--etp", type=wholes(1, MAX_RANKS),
                   help="expert tensor-parallel sizes, MoE models (default: 1 and tp)")
    p.add_argument("--cp", type=wholes(1, MAX_RANKS),
                   help="context-parallel sizes (default: every divisor of the GPUs left that splits the sequence "
                        "into 2 x cp chunks divisible by tp)")
    p.add_argument("--mbs", type=wholes(1), help="micro-batch sizes (default 1,2,4)")
    p.add_argument("--zero", type=wholes(0, 3), help="ZeRO stages (default 0,1,2,3; 3 only with pp 1)")
    p.add_argument("--schedules", help="of 1f1b, interleaved_1f1b, gpipe, zb_h1, zb_h2, interleaved_zb, zbv, "
                   "dualpipev, dualpipe, looped_bfs (default: 1f1b, interleaved_1f1b, gpipe; the others when named)")
    p.add_argument("--recompute", help="none,selective,full (default: all three)")
    p.add_argument("--max-virtual", type=whole(1), help="largest v for the interleaved schedule (default 8)")
    p.add_argument("--plot", help="write a PNG of step time against peak memory for every layout that fits")
    p.add_argument("--json", action="store_true", help="print every layout as JSON")
    p.add_argument("--no-overlap-check", action="store_true",
                   help="do not simulate the printed rows again with interference off (their 'step w/o "
                        "interference' column)")
    p.add_argument("--no-interference", action="store_true",
                   help="compute and communication do not share the GPUs (model.interference: false)")
    p.set_defaults(func=cmd_plan)
