"""`simcomm calibrate`: measure gloo on this host (or read nccl-tests logs), fit, write a profile, report."""
from __future__ import annotations

import json
import os
import sys

from ..errors import SimcommError
from ..units import sizes, whole, wholes
from ..vocab import MAX_RANKS
from .options import NODES
from .progress import with_progress

EXIT_OK = 0
DEFAULT_SIZES = [4096 * 4 ** k for k in range(8)]  # 4 KiB .. 64 MiB
# Measuring starts one real gloo process per rank on this host, each with buffers of the measured size (all_gather's
# output n times it): bounds that keep a measurement on a host's memory and within minutes.
MAX_MEASURED_RANKS, MAX_MEASURED_SIZE = 64, 1 << 30


def _saved_passes(path: str) -> list[list]:
    """The passes of a file written by --save-measurements, each a list of Measurements."""
    from ..backends.calibrate.measure import Measurement
    try:
        doc = json.loads(open(path).read())
    except (OSError, ValueError) as exc:
        raise SimcommError(f"cannot read measurements {path}: {exc}") from None
    passes = doc.get("passes") if isinstance(doc, dict) else None
    if not isinstance(passes, list) or not passes:
        raise SimcommError(f"{path}: expected a JSON object with a non-empty list 'passes', as --save-measurements "
                           f"writes")
    out = []
    for i, p in enumerate(passes):
        try:
            out.append([Measurement(**m) for m in p["points"]])
        except (TypeError, KeyError) as exc:
            raise SimcommError(f"{path}: passes[{i}]: expected 'points', each with collective, ranks, size, time "
                               f"and rounds ({exc})") from None
    return out


def _measure(args) -> list[list]:
    from ..backends import require_torch
    from ..backends.calibrate.measure import measure_gloo
    if args.measurements:
        return [ms for path in args.measurements for ms in _saved_passes(path)]
    require_torch()
    ranks = args.ranks or (2, 3, 4)
    if max(ranks) > MAX_MEASURED_RANKS:
        raise SimcommError(f"--ranks {max(ranks)}: measuring starts a real process per rank on this host; at most "
                           f"{MAX_MEASURED_RANKS}")
    passes, record = [], []
    for i in range(args.repeat):
        load = os.getloadavg()[0]
        sys.stderr.write(f"calibrate: measuring gloo, pass {i + 1} of {args.repeat} (load average {load:.2f})\n")
        ms = measure_gloo(args.sizes or DEFAULT_SIZES, tuple(ranks), rounds=args.rounds)
        passes.append(ms)
        record.append({"load_before": load, "load_after": os.getloadavg()[0], "points": [m.__dict__ for m in ms]})
    if args.save_measurements:
        with open(args.save_measurements, "w") as fh:
            json.dump({"host_cores": os.cpu_count(), "passes": record}, fh, indent=1)
    return passes


def _report_gloo(cal, passes) -> str:
    from ..units import format_size
    noise = cal.noise()
    lines = [f"calibrate: gloo on this host, {len(cal.points)} points, {len(passes)} pass(es)",
             "fitted: " + ", ".join(f"{k.split('.')[-1]}={v:.4g}" for k, v in cal.values.items()),
             f"median |error|   training: before {cal.median_abs(False, False) * 100:.1f}%  after "
             f"{cal.median_abs(False) * 100:.1f}%",
             f"median |error|  held back: before {cal.median_abs(True, False) * 100:.1f}%  after "
             f"{cal.median_abs(True) * 100:.1f}%"]
    by_kind: dict[str, list[str]] = {}
    for (kind, ranks), err in cal.held_back_by_group().items():
        by_kind.setdefault(kind, []).append(f"{err * 100:.1f}% ({ranks})")
    if by_kind:
        lines.append("held back by collective (ranks): " + "; ".join(f"{k} {', '.join(v)}"
                                                                  for k, v in by_kind.items()))
    if noise["median_round_spread"] is not None:
        lines.append(f"noise: a round is a median {noise['median_round_spread'] * 100:.0f}% slower than the point's "
                     f"fastest (max {noise['max_round_spread'] * 100:.0f}%)"
                     + (f"; the passes' fastest rounds differ by a median {noise['median_pass_difference'] * 100:.0f}% "
                        f"(max {noise['max_pass_difference'] * 100:.0f}%)" if noise["median_pass_difference"]
                        is not None else ""))
    lines.append(f"{'collective':>10} {'ranks':>5} {'size':>9} {'measured us':>12} {'per pass us':>19} "
                 f"{'before us':>10} {'after us':>10} {'error':>7}")
    for p in cal.points:
        per_pass = "/".join(f"{t * 1e6:.0f}" for t in p.passes)
        lines.append(f"{p.collective:>10} {p.ranks:5d} {format_size(p.size):>9} {p.measured * 1e6:12.1f} "
                     f"{per_pass:>19} {p.before * 1e6:10.1f} {p.after * 1e6:10.1f} {p.error_after * 100:+6.1f}%"
                     + ("  held back" if p.held_back else ""))
    if cal.profile:
        lines.append(f"wrote profile: {cal.profile} (use it as --cluster {cal.profile})")
    return "\n".join(lines)


def cmd_calibrate(args) -> int:
    if args.from_log:
        return _from_logs(args)
    from ..backends.calibrate.gloo import calibrate_gloo
    passes = _measure(args)
    cal = calibrate_gloo(passes, args.out, meta={"host_cores": os.cpu_count(), "passes": len(passes)})
    if args.json:
        sys.stdout.write(json.dumps({"values": cal.values, "noise": cal.noise(), "profile": cal.profile,
                                     "median_abs_error": {"training_before": cal.median_abs(False, False),
                                                          "training_after": cal.median_abs(False),
                                                          "held_back_before": cal.median_abs(True, False),
                                                          "held_back_after": cal.median_abs(True)},
                                     "points": [p.__dict__ for p in cal.points]}, indent=2) + "\n")
    else:
        sys.stdout.write(_report_gloo(cal, passes) + "\n")
    return EXIT_OK


def _from_logs(args) -> int:
    from collections import Counter

    from ..backends.calibrate.logs import calibrate_logs, table_observations
    from ..backends.compare_log import dropped_note
    from ..backends.nccl_log import read_log
    from ..vocab import canonical_kind
    if not args.cluster:
        raise SimcommError("--from-log needs --cluster PRESET (the machine the logs were measured on)")
    ranks = None
    if args.ranks is not None:
        if len(args.ranks) != 1:
            raise SimcommError(f"--ranks {','.join(map(str, args.ranks))}: with --from-log, the measured run's rank "
                               f"count (one whole number >= 2)")
        ranks = args.ranks[0]
    collective = canonical_kind(args.collective) if args.collective else None
    obs = []
    for log in args.from_log:
        dropped: Counter = Counter()
        for i, t in enumerate(read_log(log)):
            obs += table_observations(t, args.cluster, args.nodes, collective=collective, ranks=ranks,
                                      algorithm=args.algo, label=f"{log}#{i}", dropped=dropped)
        if dropped:
            sys.stderr.write(dropped_note(log, dropped) + "\n")
    cal = with_progress("fitting", lambda update: calibrate_logs(obs, args.cluster, args.out,
                                                                 meta={"logs": list(args.from_log)}, progress=update))
    sweeps = sorted({(o.label, o.collective, o.ranks, o.nodes) for o in obs})
    text = [f"calibrate: {len(obs)} measured sizes from {len(args.from_log)} log(s) on {args.cluster}",
            *(f"  {label}: {kind}, {n} ranks on {nodes} node(s)" for label, kind, n, nodes in sweeps),
            "fitted: " + ", ".join(f"{k.split('.', 1)[-1]}={v:.4g}" for k, v in cal.values.items()),
            f"median |error| held back (every other size): before {cal.median_abs(False) * 100:.1f}%  after "
            f"{cal.median_abs(True) * 100:.1f}%"]
    if cal.profile:
        text.append(f"wrote profile: {cal.profile}")
    sys.stdout.write("\n".join(text) + "\n")
    return EXIT_OK


def add_parser(sub) -> None:
    c = sub.add_parser("calibrate", help="fit a cluster description to measurements (gloo here, or nccl-tests logs)",
                       description="Measures gloo on this host (ping-pong and all_reduce/all_gather/broadcast "
                                   "sweeps over 2-4 ranks, several rounds and passes), fits the cpu-host figures "
                                   "(loopback bandwidth and latency, the host's shared copy bandwidth, reduction "
                                   "memory bandwidth, launch and per-step overheads, all_gather efficiency, the rate "
                                   "a core faults in fresh memory) on "
                                   "2 and 4 ranks at every other size, and reports the error on the held-back points "
                                   "before and after. With --from-log, fits a preset's launch and per-step "
                                   "overheads, efficiencies and (for logs across nodes) NIC latency and network "
                                   "efficiency to nccl-tests logs instead.")
    c.add_argument("--out", help="write the fitted profile here (YAML or .json); use it as --cluster FILE")
    c.add_argument("--sizes", type=sizes(1, MAX_MEASURED_SIZE),
                   help="comma-separated sizes, 1 B to 1 GiB (default 4K,16K,...,64M)")
    c.add_argument("--ranks", type=wholes(2, MAX_RANKS),
                   help=f"world sizes to measure, 2 to {MAX_MEASURED_RANKS} (default 2,3,4); with --from-log, the "
                        "measured run's ranks when the log does not say")
    c.add_argument("--rounds", type=whole(1, 1000), default=7, help="rounds per point and pass (default 7)")
    c.add_argument("--repeat", type=whole(1, 100), default=2,
                   help="measurement passes, to report the noise (default 2)")
    c.add_argument("--save-measurements", help="also write the raw measurements (JSON)")
    c.add_argument("--measurements", nargs="+", metavar="FILE",
                   help="fit these saved measurements instead of measuring (several files pool their passes)")
    c.add_argument("--from-log", nargs="+", metavar="LOG", help="nccl-tests logs to fit instead of measuring")
    c.add_argument("--cluster", help="with --from-log: the preset the logs were measured on")
    c.add_argument("--nodes", type=NODES, help="with --from-log: nodes of the measured run")
    c.add_argument("--algo", help="with --from-log: the algorithm the logs forced (NCCL_ALGO)")
    c.add_argument("--collective", help="with --from-log: the collective, when the log does not say")
    c.add_argument("--json", action="store_true", help="print the result as JSON")
    c.set_defaults(func=cmd_calibrate)
