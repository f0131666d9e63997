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
    from ..parallel.search import SearchSpace
    default = SearchSpace()
    given = {"tp": args.tp, "pp": args.pp, "cp": args.cp, "micro_batch_size": args.mbs, "zero": args.zero,
             "schedules": _choices(args.schedules, {"1f1b": "1f1b", "gpipe": "gpipe", "interleaved":
                                                    "interleaved_1f1b", "interleaved_1f1b": "interleaved_1f1b"},
                                   "schedule"),
             "recompute": _choices(args.recompute, {"none": None, "selective": "selective", "full": "full"},
                                   "recomputation")}
    return SearchSpace(**{k: v for k, v in given.items() if v is not None}, max_virtual=args.max_virtual or
                       default.max_virtual)


def cmd_plan(args) -> int:
    from ..parallel.search import plan
    from ..report import dumps
    from ..report.table import render
    from ..scenario import NO_INTERFERENCE, load_scenario
    from ..units import format_size
    from ..workloads.training import config_of, model_of
    loaded = load_scenario(args.scenario, NO_INTERFERENCE if args.no_interference else None)
    spec = loaded.scenario.workload
    if spec.kind != "training":
        raise SimcommError(f"{args.scenario}: simcomm plan needs a training scenario (workload kind training), "
                           f"found kind {spec.kind}")
    model, base, cluster = model_of(spec), config_of(spec), loaded.cluster
    if args.simulate > args.max_simulate:
        raise SimcommError(f"--simulate {args.simulate} is more than --max-simulate {args.max_simulate}")
    space = _space(args)
    result = with_progress("planning", lambda update: plan(model, base, cluster, space, args.jobs, args.simulate,
                                                           args.max_simulate, update, args.ray is not None,
                                                           args.ray or None))
    rows = result.rows
    valid = [r for r in rows if "error" not in r or "step_time" in r]
    fits = result.feasible
    summary = {"scenario": loaded.name, "model": model.name, "gpus": cluster.num_ranks, "cluster": cluster.name,
               "global_batch_size": base.global_batch_size, "enumerated": result.enumerated, "valid": len(valid),
               "fit_in_memory": len(fits), "schedule_bounds": result.schedule_bounds, "simulated": result.simulated,
               "best_is_proven": result.proven}
    if args.plot:
        from ..report.training_plots import plot_plan
        plot_plan(fits, args.plot, f"{loaded.name}: {len(fits)} layouts that fit ({result.simulated} simulated)")
    if args.json:
        sys.stdout.write(dumps({**summary, "rows": rows}))
        return EXIT_OK
    head = (f"plan for {model.name or 'the model'} on {cluster.num_ranks} GPUs ({cluster.name}), global batch "
            f"{base.global_batch_size} x {model.seq_length} tokens: {result.enumerated} layouts tried, "
            f"{len(valid)} valid, {len(fits)} fit in memory, {result.schedule_bounds} bounded by their schedule, "
            f"{result.simulated} simulated in full; "
            + ("the best is proven best (every other layout's lower bound is above it)" if result.proven else
               "raise --max-simulate to prove the best"))
    table = []
    for i, r in enumerate(fits[:args.top]):
        simulated = "step_time" in r
        t = r["step_time"] if simulated else r["bound"]
        table.append((i + 1, r["layout"], r["dp"], r["microbatches"], f"{t:.4g}" if simulated else f">= {t:.4g}",
                      f"{r['tflops_per_gpu']:.0f}" if simulated else "", f"{r['mfu']:.1%}" if simulated else "",
                      format_size(r["peak_memory"]), f"{r['bubble_share']:.0%}" if simulated else "",
                      f"{r['exposed_comm_share']:.0%}" if simulated else "",
                      "simulated" if simulated else f"{r['bound_kind']} bound"))
    blocks = [head, (f"best {len(table)} of {len(fits)} layouts that fit: the simulated ones by step time, then the "
                     "others by lower bound",
                     ["#", "layout", "dp", "m", "step (s)", "TFLOP/s/GPU", "MFU", "peak memory", "bubble",
                      "exposed comm", "how"], table)]
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
    p.add_argument("--top", type=whole(1), default=20, help="rows to print (default 20)")
    p.add_argument("--simulate", type=whole(0), default=16, help="simulate at least this many layouts in full")
    p.add_argument("--max-simulate", type=whole(1), default=64, help="and at most this many (default 64)")
    p.add_argument("--tp", type=wholes(1, MAX_RANKS),
                   help="tensor-parallel sizes to try, e.g. 4,8 (default: divisors of a node's GPUs)")
    p.add_argument("--pp", type=wholes(1, MAX_RANKS), help="pipeline sizes (default: every divisor that fits)")
    p.add_argument("--cp", type=wholes(1, MAX_RANKS),
                   help="context-parallel sizes (default: every divisor of the GPUs left that splits the sequence "
                        "into 2 x cp chunks divisible by tp)")
    p.add_argument("--mbs", type=wholes(1), help="micro-batch sizes (default 1,2,4)")
    p.add_argument("--zero", type=wholes(0, 3), help="ZeRO stages (default 0,1,2,3; 3 only with pp 1)")
    p.add_argument("--schedules", help="1f1b,interleaved,gpipe (default: all three)")
    p.add_argument("--recompute", help="none,selective,full (default: all three)")
    p.add_argument("--max-virtual", type=whole(1), help="largest v for the interleaved schedule (default 8)")
    p.add_argument("--plot", help="write a PNG of step time against peak memory for every layout that fits")
    p.add_argument("--json", action="store_true", help="print every layout as JSON")
    p.add_argument("--no-interference", action="store_true",
                   help="compute and communication do not share the GPUs (model.interference: false)")
    p.set_defaults(func=cmd_plan)
