"""The `simcomm` command: run, perf, sweep, presets, validate, bench.

Exit codes: 0 ok; 1 the simulated program failed (deadlock, mismatch, a rank raised); 2 bad usage or a bad
scenario. User errors print one message to stderr, never a traceback; with --json they also go to stdout as JSON.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys

from .errors import DeadlockError, MismatchError, RankFailed, SimcommError

EXIT_OK, EXIT_SIM, EXIT_USAGE = 0, 1, 2
PERF_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv",
                    "gather", "scatter")


def _tty(stream) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


def _print(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _progress(label: str):
    """A rich progress bar on a terminal's stderr; None when piped."""
    if not _tty(sys.stderr):
        return None, None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)
    task = bar.add_task(label, total=None)
    return bar, (lambda done, total: bar.update(task, completed=done, total=total))


# ---- run / validate --------------------------------------------------------------------------------------------
def cmd_run(args) -> int:
    from .report import PLOT_FILES, dumps, render, report_blocks, result_json, write_outputs
    from .scenario import load_scenario
    from .workloads import run_scenario
    loaded = load_scenario(args.scenario)
    o = loaded.scenario.outputs
    json_file = o.json or ("result.json" if args.save_json else None)
    trace_file = o.trace or ("trace.json" if args.trace else None)
    plots = o.plots or (list(PLOT_FILES) if args.plots else [])
    if args.no_files:
        json_file, trace_file, plots = None, None, []
    bar, progress = _progress(f"running {loaded.name}")
    if bar:
        with bar:
            result = run_scenario(loaded, detail=args.detail, progress=progress)
    else:
        result = run_scenario(loaded, detail=args.detail)
    written = write_outputs(result, args.out or o.dir or f"simcomm-out/{loaded.name}", json_file, trace_file, plots)
    if args.json:
        _print(dumps(result_json(result, written)))
    elif o.report:
        width = shutil.get_terminal_size((120, 24)).columns
        _print(render(report_blocks(result), rich=_tty(sys.stdout), width=width))
        for what, path in written.items():
            _print(f"wrote {what}: {path}")
    return EXIT_OK


def cmd_validate(args) -> int:
    from .scenario import ScenarioError, load_scenario
    results, code = [], EXIT_OK
    for path in args.scenarios:
        try:
            loaded = load_scenario(path)
        except ScenarioError as exc:
            code = EXIT_USAGE
            results.append({"file": path, "ok": False, "errors": [p.__dict__ for p in exc.problems]})
            if not args.json:
                sys.stderr.write(str(exc) + "\n")
            continue
        c = loaded.cluster
        summary = f"{loaded.scenario.workload.kind} on {c.name} ({c.num_ranks} ranks)"
        results.append({"file": path, "ok": True, "summary": summary})
        if not args.json:
            _print(f"ok: {path}: {summary}")
    if args.json:
        _print(json.dumps(results, indent=2))
    return code


# ---- perf ------------------------------------------------------------------------------------------------------
def _perf_cluster(args):
    from .hardware import build_cluster
    from .hardware.presets import get_preset
    probe = build_cluster(args.cluster)
    nodes = args.nodes
    if nodes is None:
        nodes = 1 if not args.ranks else -(-args.ranks // probe.ranks_per_node)
        if get_preset(args.cluster).name == "cpu-host" and args.ranks and args.ranks <= 64:
            return build_cluster(args.cluster, ranks_per_node=args.ranks)
    cluster = probe if nodes == 1 else build_cluster(args.cluster, nodes=nodes)
    if args.ranks and args.ranks > cluster.num_ranks:
        raise SimcommError(f"-g {args.ranks} does not fit {cluster.name}, which has {cluster.num_ranks} ranks")
    return cluster


def cmd_perf(args) -> int:
    from .algorithms import PROTOCOLS
    from .collective import sizes_between
    from .engine import Simulation
    from .report.table import nccl_table, tuner_summary
    from .workloads.names import COLL_ALIASES, COLLECTIVES, DTYPE_ALIASES, DTYPES, OP_ALIASES, OPS, choice
    from .units import parse_size
    from .workloads.perf import expand_algorithms, run_perf
    def pick(flag, value, choices, aliases, what):
        try:
            return choice(value, choices, aliases, what)
        except ValueError as exc:
            raise SimcommError(f"{flag}: {exc}, found {value!r}") from None
    kind = pick("collective", args.collective.removesuffix("_perf"), COLLECTIVES, COLL_ALIASES, "a collective")
    dtype = pick("-d", args.dtype, tuple(DTYPES), DTYPE_ALIASES, "a dtype")
    op = pick("-o", args.op, OPS, OP_ALIASES, "a reduce op")
    if args.proto is not None and args.proto not in PROTOCOLS:
        raise SimcommError(f"--proto: expected one of {', '.join(PROTOCOLS)}, found {args.proto!r}")
    begin, end = parse_size(args.minbytes, "-b"), parse_size(args.maxbytes, "-e")
    increment = parse_size(args.stepbytes, "-i") if args.stepbytes else None
    if not args.factor > 1 and not increment:
        raise SimcommError(f"-f: expected a factor > 1, found {args.factor:g}")
    sizes = sizes_between(begin, end, args.factor, increment)
    if len(sizes) > 4096:
        raise SimcommError(f"{len(sizes)} sizes: expected at most 4096 (raise -f or -i)")
    cluster = _perf_cluster(args)
    n = args.ranks or cluster.num_ranks
    if args.root >= n:
        raise SimcommError(f"-r: expected a root below {n}, found {args.root}")
    algos = [a.strip() for a in args.algo.split(",")] if args.algo else ["auto"]
    if not any(expand_algorithms([a], kind) for a in algos):
        from .algorithms import algorithms_for
        raise SimcommError(f"--algo: {args.algo} is not available for {kind}; expected auto, all or one of "
                           f"{', '.join(algorithms_for(kind))}")
    sim = Simulation(cluster, "steps")
    rows = run_perf(sim, [kind], sizes, ranks=n, dtype=dtype, op=op, root=args.root, algorithms=algos,
                    protocol=args.proto)
    if args.json:
        _print(json.dumps({"collective": kind, "cluster": cluster.name, "ranks": n, "dtype": dtype, "op": op,
                           "units": {"size": "bytes", "time": "seconds", "algbw": "bytes/s", "busbw": "bytes/s"},
                           "rows": [r.as_dict() for r in rows]}, indent=2))
        return EXIT_OK
    type_name = DTYPES[dtype][1]
    first = True
    for algo in expand_algorithms(algos, kind):
        sub = [r for r in rows if r.requested == (algo or "auto")]
        comments = [f"simcomm: {kind} simulated on {cluster.name}, {n} ranks of {cluster.device.name}; "
                    f"algorithm {algo or 'auto (tuner)'}, protocol {args.proto or 'auto'}"]
        text = nccl_table(sub, cluster, type_name, minbytes=begin, maxbytes=end, factor=args.factor,
                          preamble=first, comments=comments)
        _print(text + f"# simcomm: chose {tuner_summary(sub)}")
        first = False
    return EXIT_OK


# ---- sweep -----------------------------------------------------------------------------------------------------
def _parse_params(items) -> dict:
    import yaml
    out = {}
    for item in items or []:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise SimcommError(f"--param: expected KEY=V1,V2,..., found {item!r}")
        try:
            parsed = yaml.safe_load(values) if values.strip().startswith("[") else \
                [yaml.safe_load(v) for v in values.split(",")]
        except yaml.YAMLError as exc:
            raise SimcommError(f"--param {key}: cannot read the values: {exc}") from None
        out[key.strip()] = parsed if isinstance(parsed, list) else [parsed]
    return out


_US_KEYS, _GB_KEYS = ("time", "alone", "elapsed", "collective_time"), ("busbw", "peak_busbw")


def _sweep_cell(key, v):
    from .units import format_size
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    if key in _US_KEYS:
        return v * 1e6
    if key in _GB_KEYS:
        return v / 1e9
    return format_size(v) if key == "size" else v


def cmd_sweep(args) -> int:
    from .report.table import render
    from .scenario import load_scenario
    from .scenario.sweep import run_sweep
    loaded = load_scenario(args.scenario)
    sweep = loaded.scenario.sweep
    params = dict(sweep.parameters) if sweep else {}
    params.update(_parse_params(args.param))
    if not params:
        raise SimcommError(f"{args.scenario} has no sweep section; give parameters with --param KEY=V1,V2")
    jobs = args.jobs or (sweep.jobs if sweep else None)
    bar, progress = _progress("sweep")
    if bar:
        with bar:
            rows = run_sweep(loaded, params, jobs, args.ray is not None, args.ray or None, progress)
    else:
        rows = run_sweep(loaded, params, jobs, args.ray is not None, args.ray or None)
    if args.out:
        from .report.json_out import dumps
        with open(args.out, "w") as f:
            f.write(dumps({"scenario": loaded.name, "parameters": params, "rows": rows}))
    if args.json:
        from .report.json_out import dumps
        _print(dumps({"scenario": loaded.name, "parameters": params, "rows": rows}))
    else:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        heads = [k + (" (us)" if k in _US_KEYS else " (GB/s)" if k in _GB_KEYS else "") for k in keys]
        table = [[_sweep_cell(k, r.get(k)) for k in keys] for r in rows]
        _print(render([(f"sweep of {loaded.name}: {len(rows)} rows", heads, table)], rich=_tty(sys.stdout)))
    return EXIT_SIM if any("error" in r for r in rows) else EXIT_OK


# ---- presets / bench -------------------------------------------------------------------------------------------
def cmd_presets(args) -> int:
    from .hardware import PRESETS, build_cluster, describe_preset
    from .report.json_out import dumps
    from .report.table import render
    if args.name:
        d = describe_preset(args.name, args.nodes)
        if args.json:
            _print(dumps(d))
            return EXIT_OK
        rows = [(k, json.dumps(v) if isinstance(v, (dict, list)) else v) for k, v in d.items()]
        _print(render([(f"preset {d['preset']}", ["key", "value"], rows)], rich=_tty(sys.stdout)))
        return EXIT_OK
    listing = []
    for name, p in PRESETS.items():
        c = build_cluster(name)
        listing.append({"name": name, "summary": p.summary, "ranks_per_node": c.ranks_per_node,
                        "device": c.device.name, "default_fabric": p.default_fabric})
    if args.json:
        _print(dumps(listing))
    else:
        _print(render([("presets (simcomm presets NAME for details)", ["name", "ranks/node", "device", "fabric",
                                                                        "summary"],
                        [(x["name"], x["ranks_per_node"], x["device"], x["default_fabric"], x["summary"])
                         for x in listing])], rich=_tty(sys.stdout)))
    return EXIT_OK


def cmd_bench(args) -> int:
    if importlib.util.find_spec("simcomm.bench") is None:
        if any(a in ("-h", "--help") for a in args.rest):
            _print("usage: simcomm bench [...]\n\nMeasure the simulator's own speed (simcomm.bench).")
            return EXIT_OK
        raise SimcommError("simcomm bench is not available in this build (simcomm/bench.py is missing)")
    from . import bench
    try:
        return int(bench.main(list(args.rest)) or 0)
    except SystemExit as exc:  # its argparse: --help, or a usage error
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE


# ---- parser ----------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    p = argparse.ArgumentParser(prog="simcomm", description="Simulate collective communication of distributed "
                                "deep learning on modelled GPU clusters.")
    p.add_argument("--version", action="version", version=f"simcomm {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    r = sub.add_parser("run", help="run a scenario file and print its report",
                       description="Run a scenario; write JSON, trace and plots as its outputs section (or these "
                                   "flags) ask.")
    r.add_argument("scenario", help="scenario YAML file")
    r.add_argument("--out", help="output directory (default: outputs.dir, else simcomm-out/<name>)")
    r.add_argument("--json", action="store_true", help="print the result as JSON instead of the report")
    r.add_argument("--save-json", action="store_true", help="also write result.json to the output directory")
    r.add_argument("--trace", action="store_true", help="also write a Chrome/Perfetto trace (trace.json)")
    r.add_argument("--plots", action="store_true", help="also write PNG plots")
    r.add_argument("--no-files", action="store_true", help="write nothing, whatever outputs says")
    r.add_argument("--detail", choices=["flows", "steps"], help="override model.detail")
    r.set_defaults(func=cmd_run)

    f = sub.add_parser("perf", help="nccl-tests style sweep of one collective",
                       description="Speaks nccl-tests: simcomm perf all_reduce -b 8 -e 8G -f 2 -g 8 "
                                   "--cluster hgx-h100. -n/-w/-c are accepted for compatibility and ignored.")
    f.add_argument("collective", nargs="?", default="all_reduce", help=", ".join(PERF_COLLECTIVES))
    f.add_argument("-b", "--minbytes", default="32M", help="smallest size (default 32M)")
    f.add_argument("-e", "--maxbytes", default="32M", help="largest size (default 32M)")
    f.add_argument("-f", "--stepfactor", dest="factor", type=float, default=2.0, help="size factor (default 2)")
    f.add_argument("-i", "--stepbytes", default=None, help="size increment instead of a factor")
    f.add_argument("-g", "--ngpus", "--ranks", dest="ranks", type=int, default=None,
                   help="ranks in total (default: every rank of the cluster)")
    f.add_argument("-d", "--datatype", dest="dtype", default="float", help="float, half, bfloat16, double, int32...")
    f.add_argument("-o", "--op", default="sum", help="sum, prod, min, max, avg")
    f.add_argument("-r", "--root", type=int, default=0, help="root of broadcast/reduce")
    f.add_argument("--cluster", default="hgx-h100", help="preset (see simcomm presets)")
    f.add_argument("--nodes", type=int, default=None, help="nodes (default: enough for -g)")
    f.add_argument("--algo", help="NCCL_ALGO: auto, all, or names such as ring,tree (comma-separated)")
    f.add_argument("--proto", help="NCCL_PROTO: LL, LL128 or Simple")
    for flag in ("-n", "-w", "-c", "-a", "-z", "-t", "-G"):
        f.add_argument(flag, default=None, help=argparse.SUPPRESS)
    f.add_argument("--json", action="store_true", help="print rows as JSON")
    f.set_defaults(func=cmd_perf)

    s = sub.add_parser("sweep", help="run a parameter grid over a scenario in parallel",
                       description="Every combination of the scenario's sweep.parameters and --param values.")
    s.add_argument("scenario", help="scenario YAML file")
    s.add_argument("--param", action="append", metavar="KEY=V1,V2", help="dotted key and values (repeatable)")
    s.add_argument("--jobs", type=int, help="local worker processes (default: every core)")
    s.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on a Ray cluster (needs simcomm[ray]); ADDRESS defaults to a local one")
    s.add_argument("--out", help="also write the rows as JSON to this file")
    s.add_argument("--json", action="store_true", help="print rows as JSON")
    s.set_defaults(func=cmd_sweep)

    pr = sub.add_parser("presets", help="list cluster presets or describe one")
    pr.add_argument("name", nargs="?", help="describe this preset (figures, sources, overrides)")
    pr.add_argument("--nodes", type=int, default=1, help="describe it with this many nodes")
    pr.add_argument("--json", action="store_true", help="print JSON")
    pr.set_defaults(func=cmd_presets)

    v = sub.add_parser("validate", help="check scenario files without running them",
                       description="Schema, units, the cluster and cross-checks; exit 2 if any file is bad.")
    v.add_argument("scenarios", nargs="+", help="scenario YAML files")
    v.add_argument("--json", action="store_true", help="print [{file, ok, errors|summary}] as JSON")
    v.set_defaults(func=cmd_validate)

    sub.add_parser("bench", help="measure the simulator's own speed (simcomm bench --help)", add_help=False)
    return p


def _fail(args, exc: BaseException, code: int) -> int:
    problems = getattr(exc, "problems", None)  # a ScenarioError (not imported here: pydantic is slow to load)
    text = str(exc) if problems else f"simcomm: error: {exc}"
    sys.stderr.write(text.rstrip() + "\n")
    if getattr(args, "json", False):
        problems = [p.__dict__ for p in problems or []]
        _print(json.dumps({"error": {"type": type(exc).__name__, "message": str(exc), "exit_code": code,
                                     "problems": problems}}, indent=2))
    return code


def main(argv=None) -> int:
    from .hardware import HardwareError
    from .units import UnitError
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["bench"]:  # everything after `bench`, --help included, belongs to simcomm.bench
            args = argparse.Namespace(func=cmd_bench, rest=argv[1:], json=False)
        else:
            args = parser.parse_args(argv)
    except SystemExit as exc:  # --help and usage errors
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    try:
        return args.func(args)
    except (DeadlockError, MismatchError, RankFailed) as exc:
        return _fail(args, exc, EXIT_SIM)
    except (SimcommError, UnitError, HardwareError) as exc:
        return _fail(args, exc, EXIT_USAGE)
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:  # an output file or directory that cannot be written
        return _fail(args, exc, EXIT_USAGE)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
