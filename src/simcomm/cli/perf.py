"""`simcomm perf`: nccl-tests' command line and output.

Every nccl-tests flag is accepted with its short and long form. Those that shape the run (sizes, counts, type, op,
root, cycles, timeout, JSON file) are implemented; those about measurement on real GPUs (iterations, warm-up,
CUDA graphs, buffer registration, ...) are accepted and named in a `# simcomm:` comment as having no effect,
with the reason. Ranks = processes x threads x GPUs per thread, as nccl-tests counts them; the process count comes
from `--np`, from a pasted launcher command line (`simcomm perf mpirun -np 16 all_reduce_perf -g 1`) or from the
variables a real launcher sets.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass

from ..errors import SimcommError
from ..vocab import (COLL_ALIASES, COLLECTIVES, DTYPE_ALIASES, DTYPES, MAX_NODES, MAX_RANKS, NCCL_TESTS_ALL_DTYPES,
                     NCCL_TESTS_ALL_OPS, NCCL_TESTS_NAMES, OP_ALIASES, OPS, REDUCING, ROOTED, choice)
from .launcher import LAUNCHERS, Launch, from_environment, split_launcher


@dataclass(frozen=True)
class Flag:
    short: str
    long: str | None
    default: str | None
    help: str
    no_effect: str | None = None  # why it changes nothing in a simulation; None: implemented


# Every nccl-tests option (all take a value, as in nccl-tests). Order: nccl-tests' --help.
NCCL_TESTS_FLAGS = (
    Flag("-t", "--nthreads", None, "threads per process (default 1); ranks = processes x threads x GPUs"),
    Flag("-g", "--ngpus", None, "GPUs per thread (default 1)"),
    Flag("-b", "--minbytes", "32M", "smallest size, e.g. 8, 1K, 32M (default 32M)"),
    Flag("-e", "--maxbytes", "32M", "largest size (default 32M)"),
    Flag("-i", "--stepbytes", "1M", "fixed increment between sizes when -f is not given (default 1M)"),
    Flag("-f", "--stepfactor", None, "multiplication factor between sizes (default: disabled, -i steps)"),
    Flag("-n", "--iters", None, "timed iterations (default 20), as the parameter line states them", "every "
         "iteration of a deterministic simulation takes the same time, so one is simulated"),
    Flag("-m", "--agg_iters", None, "operations aggregated per iteration (default 1), as the parameter line states "
         "them", "each operation is simulated alone"),
    Flag("-w", "--warmup_iters", None, "warm-up iterations (default 5), as the parameter line states them",
         "a simulation has no warm-up effects"),
    Flag("-N", "--run_cycles", "1", "print the size sweep this many times (0, forever, is refused)"),
    Flag("-p", "--parallel_init", None, "initialise NCCL from threads in parallel",
         "communicator initialisation is not simulated"),
    Flag("-c", "--check", None, "check results this many iterations (default 1); 0 prints #wrong as N/A"),
    Flag("-o", "--op", "sum", "sum, prod, min, max, avg or all"),
    Flag("-d", "--datatype", "float", "float, half, bfloat16, double, int8, uint8, int32, uint32, int64, uint64, "
         "f8e4m3, f8e5m2 or all"),
    Flag("-r", "--root", "0", "root of broadcast, reduce, gather and scatter, or all"),
    Flag("-z", "--blocking", None, "blocking collectives",
         "the simulated collectives already run one after another"),
    Flag("-y", "--stream_null", None, "use the NULL stream", "streams are not simulated in perf"),
    Flag("-T", "--timeout", "0", "stop with an error after this many seconds of wall time (0: no limit)"),
    Flag("-G", "--cudagraph", None, "launch through CUDA graphs (default 0), as the parameter line states it",
         "kernel launch cost is not modelled"),
    Flag("-C", "--report_cputime", None, "report CPU time", "host time is not simulated"),
    Flag("-a", "--average", None, "report rank 0, average, min or max (0-3)",
         "the time reported is until the last rank finishes, the same for every rank"),
    Flag("-R", "--local_register", None, "register buffers (0, 1 local, 2 symmetric)",
         "buffer registration is not modelled"),
    Flag("-M", "--memory_report", None, "report memory use", "device memory is not tracked in perf"),
    Flag("-S", "--report_timestamps", None, "add a timestamp to each row",
         "rows carry no wall-clock time, so equal runs print equal bytes"),
    Flag("-J", "--output_file", None, "also write the results as nccl-tests JSON to this file"),
    Flag("-x", "--cta_policy", None, "NCCL CTA policy", "CTA counts are not modelled"),
    Flag("-D", "--device_implementation", None, "device-API kernel implementation",
         "NCCL's device API kernels are not modelled"),
    Flag("-V", "--device_cta_count", None, "CTAs for the device-API kernel", "CTA counts are not modelled"),
    # -I, -K and -u: listed for recent nccl-tests, but what they set (and their long forms) could not be checked
    # against nccl-tests' src/common.cu here; they are accepted so that copied command lines run, and say so.
    Flag("-I", None, None, "accepted as recent nccl-tests take it; what it sets there is not known to simcomm",
         "simcomm does not model what -I sets"),
    Flag("-K", None, None, "accepted as recent nccl-tests take it; what it sets there is not known to simcomm",
         "simcomm does not model what -K sets"),
    Flag("-u", None, None, "accepted as recent nccl-tests take it; what it sets there is not known to simcomm",
         "simcomm does not model what -u sets"),
)


def add_parser(sub) -> argparse.ArgumentParser:
    f = sub.add_parser("perf", help="nccl-tests' command line and output, simulated",
                       description="Speaks nccl-tests: simcomm perf all_reduce -b 8 -e 8G -f 2 -g 8, or paste a "
                                   "launcher line: simcomm perf mpirun -np 16 all_reduce_perf -b 8 -e 8G -f 2 -g 1. "
                                   "Every nccl-tests flag is accepted; those marked 'no effect' say why in the "
                                   "output.", allow_abbrev=False)
    f.add_argument("collective", nargs="?", default="all_reduce",
                   help=", ".join(NCCL_TESTS_NAMES.values()) + " (an nccl-tests binary name such as "
                        "all_reduce_perf works)")
    for flag in NCCL_TESTS_FLAGS:
        names = [flag.short] + ([flag.long] if flag.long else [])
        text = flag.help + (f" [no effect: {flag.no_effect}]" if flag.no_effect else "")
        f.add_argument(*names, dest="nt" + flag.short.lstrip("-"), default=None, metavar="V", help=text)
    f.add_argument("--np", dest="np", default=None, metavar="N",
                   help="processes, as mpirun -np gives them (default 1, or the launcher's count)")
    f.add_argument("--ranks", dest="ranks", default=None, metavar="N",
                   help="ranks in total, instead of --np x -t x -g")
    f.add_argument("--cluster", default="hgx-h100", help="preset (see simcomm presets; default hgx-h100)")
    f.add_argument("--nodes", default=None, metavar="N", help="nodes (default: enough for the ranks)")
    f.add_argument("--algo", help="NCCL_ALGO: auto, all, or names such as ring,tree (default: $NCCL_ALGO, else "
                                  "auto)")
    f.add_argument("--proto", help="NCCL_PROTO: LL, LL128 or Simple (default: $NCCL_PROTO, else auto)")
    f.add_argument("--json", action="store_true", help="print rows as simcomm JSON (SI units) instead")
    f.add_argument("--quiet", "--nccl-tests-only", dest="quiet", action="store_true",
                   help="print nccl-tests' lines alone: leave out simcomm's own '# simcomm:' notes (and the -J "
                        "file's 'simcomm' fields)")
    f.set_defaults(func=cmd_perf, launch=None)
    return f


def split_argv(argv: list[str]) -> tuple[list[str], Launch | None]:
    """`perf mpirun -np 16 [opts] all_reduce_perf -b 8 ...` -> (`perf all_reduce_perf -b 8 ...`, Launch)."""
    if len(argv) > 1 and argv[0] == "perf" and os.path.basename(argv[1]) in LAUNCHERS:
        launch, rest = split_launcher(argv[1:])
        return ["perf"] + rest, launch
    return argv, None


# ---- reading the flags -------------------------------------------------------------------------------------------
def _int(value, flag: str, low: int = 1, high: int | None = None) -> int:
    try:
        n = int(str(value), 0)
    except ValueError:
        raise SimcommError(f"{flag}: expected a whole number, found {value!r}") from None
    if n < low or (high is not None and n > high):
        bound = f">= {low}" if high is None else f"from {low} to {high}"
        raise SimcommError(f"{flag}: expected a whole number {bound}, found {n}")
    return n


def _pick(flag, value, choices, aliases, what) -> str:
    try:
        return choice(value, choices, aliases, what)
    except ValueError as exc:
        raise SimcommError(f"{flag}: {exc}, found {value!r}") from None


def _collective(name: str) -> str:
    return _pick("collective", os.path.basename(name).removesuffix("_perf"), COLLECTIVES, COLL_ALIASES,
                 "a collective")


def _dtypes(value: str) -> list[str]:
    if value.strip().lower() == "all":
        return list(NCCL_TESTS_ALL_DTYPES)
    return [_pick("-d", value, tuple(DTYPES), DTYPE_ALIASES, "a dtype")]


def _ops(value: str, kind: str) -> list[str]:
    if value.strip().lower() == "all":
        return list(NCCL_TESTS_ALL_OPS) if kind in REDUCING else ["sum"]
    return [_pick("-o", value, OPS, OP_ALIASES, "a reduce op")]


def _roots(value: str, kind: str, n: int) -> list[int]:
    if value.strip().lower() == "all":
        return list(range(n)) if kind in ROOTED else [0]
    root = _int(value, "-r", 0)
    if root >= n:
        raise SimcommError(f"-r: expected a root below {n} (the number of ranks), found {root}")
    return [root]


def _algorithms(args, env: dict, kind: str) -> tuple[list[str], str]:
    """--algo, else NCCL_ALGO: every name must exist for `kind` (a typo is an error, never dropped)."""
    from ..algorithms import algorithms_for
    text, source = (args.algo, "--algo") if args.algo else (env.get("NCCL_ALGO"), "NCCL_ALGO")
    if not text:
        return ["auto"], ""
    if text.strip().startswith("^"):
        raise SimcommError(f"{source}={text}: excluding algorithms is not supported; name the ones to run")
    known = algorithms_for(kind)
    names = [a.strip().lower() for a in text.split(",")]
    for a in names:
        if a not in known + ["auto", "all"]:
            raise SimcommError(f"{source}: {a!r} is not an algorithm for {kind}; expected auto, all or one of "
                               f"{', '.join(known)}")
    return list(dict.fromkeys(names)), (f"{source}={text}" if source == "NCCL_ALGO" else "")


def _protocol(args, env: dict) -> str | None:
    from ..algorithms import PROTOCOLS
    text, source = (args.proto, "--proto") if args.proto else (env.get("NCCL_PROTO"), "NCCL_PROTO")
    if not text:
        return None
    match = {p.lower(): p for p in PROTOCOLS}.get(text.strip().lower())
    if match is None:
        raise SimcommError(f"{source}: expected one of {', '.join(PROTOCOLS)}, found {text!r}")
    return match


@dataclass
class Counts:
    processes: int
    threads: int
    gpus: int
    ranks: int
    nodes: int | None  # None: as many as the ranks need
    per_node: int | None  # ranks per node the launcher asked for
    note: str


def _counts(args, launch: Launch | None) -> Counts:
    t = _int(args.ntt, "-t") if args.ntt is not None else None
    g = _int(args.ntg, "-g") if args.ntg is not None else None
    np_ = _int(args.np, "--np") if args.np is not None else None
    if np_ is None and launch is not None:
        np_ = launch.processes
    nodes = _int(args.nodes, "--nodes") if args.nodes is not None else (launch.nodes if launch else None)
    if args.ranks is not None:
        if any(v is not None for v in (t, g, np_)):
            raise SimcommError("--ranks gives the total; use it or --np/-t/-g, not both")
        n = _int(args.ranks, "--ranks", 1, MAX_RANKS)
        return Counts(1, 1, n, n, nodes, None, f"{n} ranks (--ranks)")
    if t is None and g is None and np_ is None:
        return Counts(1, 1, 0, 0, nodes, None, "")  # every rank of the cluster, decided once it is built
    t, g, np_ = t or 1, g or 1, np_ or 1
    n = np_ * t * g
    if n > MAX_RANKS:
        raise SimcommError(f"{np_} processes x {t} threads x {g} GPUs = {n} ranks; simcomm perf simulates at "
                           f"most {MAX_RANKS}")
    per_node = launch.per_node * t * g if launch and launch.per_node else None
    where = f" ({launch.source})" if launch and launch.source else ""
    return Counts(np_, t, g, n, nodes, per_node,
                  f"{n} ranks = {np_} process{'es' if np_ > 1 else ''}{where} x {t} thread{'s' if t > 1 else ''} "
                  f"x {g} GPU{'s' if g > 1 else ''}")


def _cluster(name: str, counts: Counts):
    """The preset with enough nodes for the ranks (or --nodes), filled node after node."""
    from ..hardware import build_cluster
    from ..hardware.presets import get_preset
    cpu = get_preset(name).name == "cpu-host"  # its ranks per node can be chosen; GPU boxes have fixed GPUs
    per_node = None
    if counts.per_node is not None:
        fixed = build_cluster(name).ranks_per_node
        if counts.per_node != fixed and not (cpu and counts.per_node <= 64):
            raise SimcommError(f"the launcher places {counts.per_node} ranks per node, but {name} has {fixed} "
                               "GPUs per node and simcomm fills nodes one after another; use "
                               f"{fixed} ranks per node (processes x threads x GPUs)")
        per_node = counts.per_node if cpu else None
    elif cpu and counts.nodes is None and 0 < counts.ranks <= 64:
        per_node = counts.ranks
    probe = build_cluster(name, ranks_per_node=per_node)
    rpn = probe.ranks_per_node
    nodes = counts.nodes or max(1, -(-counts.ranks // rpn))
    if nodes > MAX_NODES or nodes * rpn > MAX_RANKS:
        raise SimcommError(f"{nodes} nodes of {probe.name} are {nodes * rpn} ranks; simcomm perf simulates at most "
                           f"{MAX_RANKS} ranks ({MAX_RANKS // rpn} nodes of it)")
    cluster = probe if nodes == 1 else build_cluster(name, nodes=nodes, ranks_per_node=per_node)
    if counts.ranks > cluster.num_ranks:
        raise SimcommError(f"{counts.ranks} ranks do not fit {cluster.name}, which has {cluster.num_ranks} ranks")
    return cluster


MAX_BYTES = 2 ** 63 - 1  # -b and -e: beyond, no byte count is meaningful (nccl-tests' sizes are size_t)


def _fits(end: int, text: str, cluster) -> None:
    """-e must fit one device's memory: nccl-tests allocates its send and receive buffers on every GPU."""
    from ..units import format_size
    capacity = cluster.device.memory_capacity
    if end > capacity:
        raise SimcommError(f"-e {text}: {format_size(end)} is more than one device of {cluster.name} holds "
                           f"({format_size(capacity)}); nccl-tests allocates buffers of up to -e bytes on every GPU")


def _sizes(args) -> tuple[list[int], int, int, float | None, int]:
    from ..collective import sizes_between
    from ..units import parse_size
    begin = parse_size(args.ntb or "32M", "-b")
    end = parse_size(args.nte or "32M", "-e")
    for flag, value, text in (("-b", begin, args.ntb), ("-e", end, args.nte)):
        if value > MAX_BYTES:  # said before any message could print the number (1e300 has 301 digits)
            raise SimcommError(f"{flag} {text}: expected at most 2**63 - 1 bytes (8 EiB); nccl-tests allocates "
                               "buffers of up to -e bytes on every GPU")
    step = parse_size(args.nti or "1M", "-i")
    factor = None
    if args.ntf is not None:
        try:
            factor = float(args.ntf)
        except ValueError:
            raise SimcommError(f"-f: expected a number, found {args.ntf!r}") from None
        if factor < 1 or factor != factor:
            raise SimcommError(f"-f: expected a factor > 1 (or 1 for -i steps, as nccl-tests), found {args.ntf}")
        if factor == 1:  # nccl-tests: a factor of 1 means "no factor": fixed -i steps
            factor = None
    try:
        sizes = sizes_between(begin, end, factor, None) if factor is not None else \
            sizes_between(begin, end, increment=step)
    except SimcommError as exc:
        how = f"-f {args.ntf}" if factor is not None else \
            f"-i {args.nti or '1M'}" + ("" if args.nti else " (nccl-tests' default step when -f is not given)")
        raise SimcommError(f"-b {args.ntb or '32M'} -e {args.nte or '32M'} {how}: {exc}") from None
    return sizes, begin, end, factor, step


# ---- running -----------------------------------------------------------------------------------------------------
def cmd_perf(args) -> int:
    from ..report.nccl_tests import Header, nccl_json, nccl_output, tuner_comments, tuner_summary
    from ..session import Session
    from ..workloads.perf import expand_algorithms, run_perf, tuner_json
    launch = args.launch or from_environment()
    env = {**{k: v for k, v in os.environ.items() if k.startswith("NCCL_")}, **(launch.env if launch else {})}
    kind = _collective(args.collective)
    dtypes = _dtypes(args.ntd or "float")
    ops = _ops(args.nto or "sum", kind)
    sizes, begin, end, factor, step = _sizes(args)
    cycles = _int(args.ntN, "-N", 0) if args.ntN is not None else 1
    if cycles == 0:
        raise SimcommError("-N 0 runs forever in nccl-tests; a simulation gives the same rows every cycle, so give "
                           "a count >= 1")
    timeout = _timeout(args.ntT)
    algos, algo_note = _algorithms(args, env, kind)
    proto = _protocol(args, env)
    counts = _counts(args, launch)
    cluster = _cluster(args.cluster, counts)
    if not counts.ranks:
        n = cluster.num_ranks
        counts = Counts(1, 1, n, n, counts.nodes, None, f"{n} ranks: every GPU of {cluster.name} (no -g, -t or "
                        "--np given; nccl-tests would use 1)")
    n = counts.ranks
    _fits(end, args.nte or "32M", cluster)
    roots = _roots(args.ntr or "0", kind, n)
    if launch is not None and launch.rank != 0:
        return 0  # one of several processes a real launcher started: process 0 prints, as nccl-tests' rank 0
    deadline = time.perf_counter() + timeout if timeout else None
    ignored = [f"{f.short} {getattr(args, 'nt' + f.short.lstrip('-'))} ({f.no_effect})" for f in NCCL_TESTS_FLAGS
               if f.no_effect and getattr(args, "nt" + f.short.lstrip("-")) is not None]

    def tick():
        if deadline is not None and time.perf_counter() > deadline:
            raise SimcommError(f"-T {args.ntT}: the simulation ran past {timeout:g} s of wall time")

    tables, all_rows = [], []
    for algo in algos:
        if not expand_algorithms([algo], kind):
            raise SimcommError(f"--algo: {algo} is not available for {kind}")
        for one in expand_algorithms([algo], kind):
            rows = []
            for dtype in dtypes:
                for op in ops:
                    for root in roots:
                        rows += run_perf(Session(cluster, detail="steps"), [kind], sizes, ranks=n, dtype=dtype, op=op, root=root,
                                         algorithms=[one or "auto"], protocol=proto, progress=tick)
            all_rows += rows
            comments = [f"{kind} on {cluster.name}: algorithm {one or 'auto (the tuner)'}, protocol "
                        f"{proto or 'auto'}; chose {tuner_summary(rows)}"] + tuner_comments(rows[:len(sizes)])
            tables.append((comments, rows * cycles))
    header = Header(f"{NCCL_TESTS_NAMES[kind]}_perf", counts.threads, counts.gpus, begin, end, factor, step,
                    **_measurement(args), quiet=args.quiet, args=list(getattr(args, "argv", None) or []), env=env)
    header.comments = [counts.note] + ([algo_note] if algo_note else []) + \
        [f"no effect in simulation: {x}" for x in ignored] + \
        ([f"{' '.join(launch.ignored)}: launcher options with no effect"] if launch and launch.ignored else [])
    if args.ntJ:
        with open(args.ntJ, "w") as fh:
            fh.write(json.dumps(nccl_json(tables, cluster, n, header), indent=2) + "\n")
    if args.json:
        doc = {"collective": kind, "cluster": cluster.name, "ranks": n, "dtype": dtypes[0], "op": ops[0],
               "units": {"size": "bytes", "time": "seconds", "algbw": "bytes/s", "busbw": "bytes/s"},
               "rows": [r.as_dict() for r in all_rows], "tuner": tuner_json(all_rows)}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    sys.stdout.write(nccl_output(tables, cluster, n, header))
    return 0


def _measurement(args) -> dict:
    """The iteration counts, validation and graph flags nccl-tests states in its parameter line (its defaults
    when not given)."""
    return {"iters": _int(args.ntn, "-n") if args.ntn is not None else 20,
            "warmup": _int(args.ntw, "-w", 0) if args.ntw is not None else 5,
            "agg_iters": _int(args.ntm, "-m") if args.ntm is not None else 1,
            "validation": _int(args.ntc, "-c", 0) if args.ntc is not None else 1,
            "graph": _int(args.ntG, "-G", 0) if args.ntG is not None else 0}


def _timeout(value) -> float:
    if value is None:
        return 0.0
    try:
        t = float(value)
    except ValueError:
        raise SimcommError(f"-T: expected seconds, found {value!r}") from None
    if not t >= 0 or t == float("inf"):
        raise SimcommError(f"-T: expected a number of seconds >= 0 (0: no limit), found {value}")
    return t
