"""The `simcomm` command: run, perf, sweep, presets, validate, bench.

Exit codes: 0 ok; 1 the simulated program failed (deadlock, mismatch, a rank raised, out of device memory); 2 bad
usage or a bad scenario. User errors print one message to stderr, never a traceback; with --json they also go to stdout as JSON.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from pathlib import Path

from ..errors import DeadlockError, MismatchError, OutOfMemoryError, RankFailed, SimcommError, user_traceback
from . import calibrate_cmd, compare_cmd, perf, plan, torch_launch
from .options import JOBS, NODES, usable_cores
from .progress import with_progress

EXIT_OK, EXIT_SIM, EXIT_USAGE = 0, 1, 2


def _tty(stream) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


def _print(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


# ---- scenario files ---------------------------------------------------------------------------------------------
# The checkout's scenarios/, beside src/ (an editable install, as the README's); a wheel carries none.
SHIPPED_SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def shipped_scenarios() -> list[str]:
    """Names of the scenarios that come with simcomm (`simcomm run NAME` runs one from any directory)."""
    return sorted(f.stem for f in SHIPPED_SCENARIOS.glob("*.yaml")) if SHIPPED_SCENARIOS.is_dir() else []


def scenario_path(name: str) -> str:
    """The scenario file `name` names: the file itself where it exists; else, for a bare name (`quickstart`,
    `quickstart.yaml`) or one under `scenarios/` (the README's `scenarios/quickstart.yaml`, typed outside the
    checkout), the scenario shipped with simcomm. A bare name that is neither is an error listing the names."""
    path = Path(name)
    if path.exists() or path.is_absolute() or path.parts[:-1] not in ((), ("scenarios",)):
        return name
    stem = path.name.rsplit(".", 1)[0] if path.suffix in (".yaml", ".yml") else path.name
    shipped = SHIPPED_SCENARIOS / f"{stem}.yaml"
    if shipped.is_file():
        return str(shipped)
    if len(path.parts) > 1:
        return name  # the loader says it cannot read it
    names = shipped_scenarios()
    raise SimcommError(f"{name}: no such scenario file, and no scenario of that name ships with simcomm"
                       + (f" (shipped: {', '.join(names)})" if names else ""))


# ---- run / validate --------------------------------------------------------------------------------------------
def cmd_run(args) -> int:
    """Run each scenario in turn; with several, a failing one is reported and the others still run."""
    if len(args.scenarios) == 1:
        return _run_one(args, args.scenarios[0], args.out, [])
    docs: list = []
    code = EXIT_OK
    for path in args.scenarios:
        out = None if args.out is None else f"{args.out}/{path.rsplit('/', 1)[-1].rsplit('.', 1)[0]}"
        try:
            code = max(code, _run_one(args, path, out, docs))
        except Exception as exc:  # noqa: BLE001 - classified by _classify; anything else is re-raised
            status = _classify(exc)
            if status is None:
                raise
            code = max(code, status)
            sys.stderr.write(f"simcomm: error: {path}: {exc}\n{rank_traceback(exc)}"
                             if not getattr(exc, "problems", None) else str(exc).rstrip() + "\n")
            docs.append({"scenario_file": path, "error": {"type": type(exc).__name__, "message": str(exc),
                                                          "exit_code": status}})
    if args.json:
        from ..report import dumps
        _print(dumps(docs))
    return code


def _run_one(args, path: str, out: str | None, docs: list) -> int:
    from ..report import PLOT_FILES, dumps, render, result_json, write_outputs
    from ..scenario import NO_INTERFERENCE, load_scenario
    from ..workloads import plots_for, report_blocks, run_scenario
    loaded = load_scenario(scenario_path(path), NO_INTERFERENCE if args.no_interference else None)
    o = loaded.scenario.outputs
    json_file = o.json or ("result.json" if args.save_json else None)
    trace_file = o.trace or ("trace.json" if args.trace else None)
    plots = o.plots or (list(PLOT_FILES) if args.plots else [])
    rank_traces = o.rank_traces or ("rank_traces" if args.rank_traces else None)
    if args.no_files:
        json_file, trace_file, plots, rank_traces = None, None, [], None
    result = with_progress(f"running {loaded.name}",
                           lambda update: run_scenario(loaded, detail=args.detail, progress=update))
    written = write_outputs(result, out or o.dir or f"simcomm-out/{loaded.name}", json_file, trace_file,
                            plots_for(result, plots), rank_traces)
    if args.json:
        doc = result_json(result, written)
        if len(args.scenarios) == 1:
            _print(dumps(doc))
        else:
            docs.append({"scenario_file": path, **doc})
    elif o.report:
        width = shutil.get_terminal_size((120, 24)).columns
        _print(render(report_blocks(result), rich=_tty(sys.stdout), width=width))
        for what, where in written.items():
            _print(f"wrote {what}: {where}" + (_rank_traces_note(where, result.cluster) if what == "rank_traces"
                                               else ""))
    return EXIT_OK


def _rank_traces_note(directory, cluster) -> str:
    """How many ranks have a file (those that ran something in the simulation, or every rank where the workload
    says which simulated rank each one copies: ranks.txt), and how HTA should load them."""
    index = Path(directory) / "ranks.txt"
    if index.exists():
        return f" ({index.read_text().splitlines()[1].split(' (')[0].rstrip('.')}; ranks.txt says which were simulated)" + HTA_HINT
    files = len(list(Path(directory).glob("rank*.json")))
    shown = f" ({files} of the cluster's {cluster.num_ranks} ranks ran something in the simulation; only they " \
            "have a file)" if files < cluster.num_ranks else ""
    return shown + HTA_HINT


def cmd_validate(args) -> int:
    from ..scenario import ScenarioError, load_scenario
    results, code = [], EXIT_OK
    for path in args.scenarios:
        try:
            loaded = load_scenario(scenario_path(path))
        except ScenarioError as exc:
            code = EXIT_USAGE
            results.append({"file": path, "ok": False, "errors": [p.__dict__ for p in exc.problems]})
            if not args.json:
                sys.stderr.write(str(exc) + "\n")
            continue
        if args.import_programs and loaded.scenario.workload.kind == "program":
            from ..workloads import resolve_program
            try:  # asked for: runs the module's code, as `run` would
                resolve_program(loaded.scenario.workload.program, error=loaded.source.error,
                                directory=loaded.scenario.directory)
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
    from ..units import format_size
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    if key in _US_KEYS:
        return v * 1e6
    if key in _GB_KEYS:
        return v / 1e9
    return format_size(v) if key == "size" else v


def cmd_sweep(args) -> int:
    from pathlib import Path

    from ..report.table import render
    from ..scenario import load_scenario
    from ..scenario.sweep import run_sweep
    loaded = load_scenario(scenario_path(args.scenario))
    sweep = loaded.scenario.sweep
    params = dict(sweep.parameters) if sweep else {}
    params.update(_parse_params(args.param))
    if not params:
        raise SimcommError(f"{args.scenario} has no sweep section; give parameters with --param KEY=V1,V2")
    jobs = args.jobs or (sweep.jobs if sweep else None)
    if jobs is not None and jobs > usable_cores():  # a scenario file travels between hosts; --jobs is checked
        sys.stderr.write(f"note: sweep.jobs {jobs} is more than this host's {usable_cores()} cores: running "
                         f"{usable_cores()} workers\n")
        jobs = usable_cores()
    rows = with_progress("sweep", lambda update: run_sweep(loaded, params, jobs, args.ray is not None,
                                                          args.ray or None, update))
    from ..report.json_out import dumps
    doc = {"scenario": loaded.name, "parameters": params, "rows": rows}
    o = loaded.scenario.outputs
    # --out FILE, else the scenario's outputs.json (in outputs.dir, else simcomm-out/<name>), as `run` writes it
    target = args.out or (str(Path(o.dir or f"simcomm-out/{loaded.name}") / o.json) if o.json else None)
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(dumps(doc))
    skipped = [k for k in ("trace", "plots", "rank_traces") if getattr(o, k)]
    if skipped:  # a sweep runs each point with steps detail and keeps only its summary rows
        sys.stderr.write(f"note: a sweep writes no {', '.join('outputs.' + k for k in skipped)}; "
                         f"simcomm run {args.scenario} does\n")
    if args.json:
        _print(dumps(doc))
    elif o.report:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        heads = [k + (" (us)" if k in _US_KEYS else " (GB/s)" if k in _GB_KEYS else "") for k in keys]
        table = [[_sweep_cell(k, r.get(k)) for k in keys] for r in rows]
        _print(render([(f"sweep of {loaded.name}: {len(rows)} rows", heads, table)], rich=_tty(sys.stdout)))
    if target and not args.json and o.report:
        _print(f"wrote json: {target}")
    return EXIT_SIM if any("error" in r for r in rows) else EXIT_OK


# ---- presets / bench -------------------------------------------------------------------------------------------
PRESET_UNITS = {"memory_bandwidth": "bytes/s", "memory_capacity": "bytes", "compute_rate": "flop/s",
                "bandwidth": "bytes/s", "latency": "seconds"}


def _preset_value(key: str, v) -> str:
    """A preset figure with its unit: 3 TB/s, 80 GiB, 790 TFLOP/s, 'nvlink 370.8 GB/s, 700 ns'."""
    from ..units import format_rate, format_size, format_time
    if isinstance(v, dict):
        parts = []
        for k, x in v.items():
            if k == "bandwidth":
                parts.append(f"{format_rate(x)} per direction" if x else "none")
            elif k == "latency":
                parts.append(f"{format_time(x)} latency" if x else "")
            else:
                parts.append(f"{k.replace('_', ' ')} {x}")
        return ", ".join(p for p in parts if p) or "-"
    if isinstance(v, list):
        return "; ".join(map(str, v)) or "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if key == "memory_bandwidth":
        return format_rate(v)
    if key == "memory_capacity":
        return format_size(v)
    if key == "compute_rate":
        return f"{v / 1e12:g} TFLOP/s"
    return str(v)


# HTA rounds ns-resolution kernels to whole us (start up, end down): a kernel under 1 us gets a negative length
HTA_HINT = " (load it into HTA with HTA_DISABLE_NS_ROUNDING=1: HTA rounds kernels to whole us otherwise)"
PROSE_CELL = 100  # characters: a longer preset value is printed as a wrapped paragraph


def cmd_presets(args) -> int:
    from ..hardware import PRESETS, build_cluster, describe_preset
    from ..report.json_out import dumps
    from ..report.table import render
    if args.name:
        d = describe_preset(args.name, args.nodes)
        if args.json:
            _print(dumps({**d, "units": PRESET_UNITS}))
            return EXIT_OK
        rows = [(k, _preset_value(k, v)) for k, v in d.items()]
        # prose (the description, the sources) is wrapped below the table rather than stretching one cell
        prose = [(k, v) for k, v in rows if len(v) > PROSE_CELL]
        rows = [(k, "(below)" if len(v) > PROSE_CELL else v) for k, v in rows]
        _print(render([(f"preset {d['preset']}", ["key", "value"], rows)], rich=_tty(sys.stdout)))
        for k, v in prose:
            _print(f"\n{k}:\n" + textwrap.fill(v, width=100, initial_indent="  ", subsequent_indent="  ",
                                               break_on_hyphens=False, break_long_words=False))
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
    from .. import bench
    try:
        return int(bench.main(list(args.rest)) or 0)
    except SystemExit as exc:  # its argparse: --help, or a usage error
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE


# ---- parser ----------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    p = argparse.ArgumentParser(prog="simcomm", description="Simulate collective communication of distributed "
                                "deep learning on modelled GPU clusters.")
    p.add_argument("--version", action="version", version=f"simcomm {__version__}")
    p.add_argument("--debug", action="store_true", help="on an error, also print Python's full traceback")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    r = sub.add_parser("run", help="run a scenario file and print its report",
                       description="Run a scenario; write JSON, trace and plots as its outputs section (or these "
                                   "flags) ask.")
    r.add_argument("scenarios", nargs="+", metavar="scenario",
                   help="scenario YAML files, run one after another; a bare name (quickstart) runs a shipped "
                        "scenario from any directory")
    r.add_argument("--out", help="output directory (default: outputs.dir, else simcomm-out/<name>; with several "
                                 "scenarios, OUT/<file name> each)")
    r.add_argument("--json", action="store_true", help="print the result as JSON instead of the report (a list "
                                                       "with several scenarios)")
    r.add_argument("--save-json", action="store_true", help="also write result.json to the output directory")
    r.add_argument("--trace", action="store_true", help="also write a Chrome/Perfetto trace (trace.json)")
    r.add_argument("--plots", action="store_true", help="also write PNG plots")
    r.add_argument("--rank-traces", action="store_true",
                   help="also write one PyTorch-profiler-style trace per rank (rank_traces/rank<N>.json) for "
                        "Holistic Trace Analysis")
    r.add_argument("--no-files", action="store_true", help="write nothing, whatever outputs says")
    r.add_argument("--detail", choices=["flows", "steps"], help="override model.detail")
    r.add_argument("--no-interference", action="store_true",
                   help="compute and communication do not share the GPUs (model.interference: false)")
    r.set_defaults(func=cmd_run)

    perf.add_parser(sub)

    s = sub.add_parser("sweep", help="run a parameter grid over a scenario in parallel",
                       description="Every combination of the scenario's sweep.parameters and --param values.")
    s.add_argument("scenario", help="scenario YAML file")
    s.add_argument("--param", action="append", metavar="KEY=V1,V2", help="dotted key and values (repeatable)")
    s.add_argument("--jobs", type=JOBS, help="local worker processes, 1 to this host's cores (default: sweep.jobs, "
                                           "else every core)")
    s.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="run on a Ray cluster (needs simcomm[ray]); ADDRESS defaults to a local one")
    s.add_argument("--out", help="also write the rows as JSON to this file (default: the scenario's outputs.json, "
                                 "if it names one)")
    s.add_argument("--json", action="store_true", help="print rows as JSON")
    s.set_defaults(func=cmd_sweep)

    pr = sub.add_parser("presets", help="list cluster presets or describe one")
    pr.add_argument("name", nargs="?", help="describe this preset (figures, sources, overrides)")
    pr.add_argument("--nodes", type=NODES, default=1, help="describe it with this many nodes")
    pr.add_argument("--json", action="store_true", help="print JSON")
    pr.set_defaults(func=cmd_presets)

    v = sub.add_parser("validate", help="check scenario files without running them",
                       description="Schema, units, the cluster and cross-checks; exit 2 if any file is bad.")
    v.add_argument("scenarios", nargs="+", help="scenario YAML files")
    v.add_argument("--json", action="store_true", help="print [{file, ok, errors|summary}] as JSON")
    v.add_argument("--import", dest="import_programs", action="store_true",
                   help="also import a program workload's module (this runs its code; without it the module and "
                        "function are only looked up)")
    v.set_defaults(func=cmd_validate)

    sub.add_parser("bench", help="measure the simulator's own speed (simcomm bench --help)", add_help=False)
    torch_launch.add_parser(sub)
    compare_cmd.add_parser(sub)
    plan.add_parser(sub)
    calibrate_cmd.add_parser(sub)
    for name in ("run", "perf", "sweep", "presets", "validate", "compare", "calibrate"):  # after the command too
        sub.choices[name].add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                       help="on an error, also print Python's full traceback")
    return p


def rank_traceback(exc: BaseException) -> str:
    """The failing rank's traceback for a RankFailed, from the rank program's own first frame down (simcomm's
    thread machinery above it left out); "" for other errors."""
    orig = getattr(exc, "original", None)
    if not isinstance(exc, RankFailed) or orig is None:
        return ""
    return f"rank {exc.rank}: {user_traceback(orig)}"


def _fail(args, exc: BaseException, code: int) -> int:
    import traceback
    problems = getattr(exc, "problems", None)  # a ScenarioError (not imported here: pydantic is slow to load)
    text = str(exc) if problems else f"simcomm: error: {exc}"
    # --debug: Python's whole traceback (a failed rank's is chained under it); else a failed rank's own frames
    where = "".join(traceback.format_exception(exc)) if getattr(args, "debug", False) else rank_traceback(exc)
    sys.stderr.write(text.rstrip() + "\n" + where)
    if getattr(args, "json", False):
        problems = [p.__dict__ for p in problems or []]
        doc = {"type": type(exc).__name__, "message": str(exc), "exit_code": code, "problems": problems}
        if where:
            doc["traceback"] = where
        _print(json.dumps({"error": doc}, indent=2))
    return code


def _classify(exc: BaseException) -> int | None:
    """The exit code for an error a user can cause; None for a bug (which keeps its traceback)."""
    from ..hardware import HardwareError
    from ..units import UnitError
    if isinstance(exc, (DeadlockError, MismatchError, RankFailed, OutOfMemoryError)):
        return EXIT_SIM
    if isinstance(exc, (SimcommError, UnitError, HardwareError, OSError)):
        return EXIT_USAGE
    return None


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["bench"]:  # everything after `bench`, --help included, belongs to simcomm.bench
            args = argparse.Namespace(func=cmd_bench, rest=argv[1:], json=False)
        else:
            argv, launch = perf.split_argv(argv)  # `perf mpirun -np 16 all_reduce_perf ...`
            args = parser.parse_args(argv)
            args.argv = argv[1:] if argv[:1] == ["perf"] else argv  # the command line nccl-tests' -J records
            if launch is not None:
                args.launch = launch
    except SystemExit as exc:  # --help and usage errors
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    except SimcommError as exc:  # a launcher line that cannot be read
        return _fail(argparse.Namespace(json="--json" in argv), exc, EXIT_USAGE)
    try:
        return args.func(args)
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - user errors get one line; bugs keep their traceback
        code = _classify(exc)
        if code is None:
            raise
        return _fail(args, exc, code)


__all__ = ["EXIT_OK", "EXIT_SIM", "EXIT_USAGE", "build_parser", "main"]
