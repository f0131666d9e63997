"""`simcomm compare`: nccl-tests logs against the simulator's prediction of the same sweeps."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import SimcommError
from ..units import whole
from .options import NODES, RANKS
from .progress import with_progress

EXIT_OK = 0


def _systems(args) -> int:
    from ..backends.compare_systems import compare_systems, render_system
    if args.logs or args.cluster:
        raise SimcommError("--systems compares each system on its own preset and logs: pass no LOG or --cluster")
    results = compare_systems(args.systems, args.system)
    if args.json:
        def bands(rows):
            return [{"band": b, "gm_abs_error": e, "sizes": k} for b, e, k in rows]
        sys.stdout.write(json.dumps([{"system": r.name, "preset": r.preset, "nodes": r.nodes,
                                      "bands": bands(r.bands()), "known_gap_bands": bands(r.bands(gaps=True)),
                                      "sweeps": [{"collective": c.collective, "ranks": c.ranks, "nodes": c.nodes,
                                                  "source": c.source, "bands": bands(c.bands())}
                                                 for c in r.sweeps]} for r in results], indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(render_system(r) for r in results) + "\n")
    return EXIT_OK


def cmd_compare(args) -> int:
    from ..backends.compare_log import band_errors, bands_text, compare_table, dropped_note, render
    from ..backends.nccl_log import read_log
    from ..vocab import canonical_kind
    if args.systems:
        return _systems(args)
    if not args.logs or not args.cluster:
        raise SimcommError("compare needs LOG... and --cluster PRESET (or --systems FILE)")
    collective = canonical_kind(args.collective) if args.collective else None
    comparisons = []
    for log in args.logs:
        tables = read_log(log)
        if args.table is not None:
            if not 0 <= args.table < len(tables):
                raise SimcommError(f"{log}: --table {args.table} out of range: the log has {len(tables)} table(s)")
            tables = [tables[args.table]]
        for i, t in enumerate(tables):
            def compare(update, t=t):
                return compare_table(t, args.cluster, nodes=args.nodes, collective=collective, ranks=args.ranks,
                                     algorithm=args.algo, protocol=args.proto, in_place=args.in_place,
                                     progress=update)
            comparisons.append(with_progress(f"{Path(log).name}: table {i + 1} of {len(tables)}", compare))
    for c in comparisons:
        if c.dropped:
            sys.stderr.write(dropped_note(c.source or "the log", c.dropped) + "\n")
    if not any(c.points for c in comparisons):
        raise SimcommError("no row of the log(s) has a usable measurement (see the notes above)")
    if args.json:
        out = [{"collective": c.collective, "ranks": c.ranks, "nodes": c.nodes, "cluster": c.cluster,
                "title": c.title, "source": c.source, "dropped": dict(c.dropped),
                "points": [{"size": p.size, "measured": p.measured, "predicted": p.predicted, "error": p.error,
                            "algorithm": p.algorithm, "protocol": p.protocol} for p in c.points],
                "bands": [{"band": b, "gm_abs_error": e, "sizes": k} for b, e, k in c.bands()]}
               for c in comparisons]
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write("\n\n".join(render(c) for c in comparisons) + "\n")
        if len(comparisons) > 1:
            pooled = band_errors([p for c in comparisons for p in c.points])
            sys.stdout.write(f"\npooled over {len(comparisons)} tables: geometric-mean |error|: "
                             f"{bands_text(pooled)}\n")
    if args.plot is not None:
        from ..backends.compare_plot import plot_comparisons
        path = args.plot or f"{Path(args.logs[0]).stem}-compare.png"
        written = plot_comparisons(comparisons, path)
        sys.stderr.write(f"wrote plot: {written}\n")
    return EXIT_OK


def add_parser(sub) -> None:
    c = sub.add_parser("compare", help="compare nccl-tests logs with the simulator's prediction",
                       description="Reads nccl-tests output (text in any of its forms, or -J JSON), simulates the "
                                   "same collective, sizes, dtype and ranks on --cluster, and prints per size the "
                                   "measured and predicted times, the signed error and busbw, plus the "
                                   "geometric-mean absolute error per size band (pooled over the tables too, "
                                   "when there are several). With --systems, the measured systems of a systems "
                                   "file, each on its own preset.")
    c.add_argument("logs", nargs="*", metavar="LOG", help="nccl-tests output files")
    c.add_argument("--cluster", help="preset (see simcomm presets) or a calibrated profile file (required with LOG)")
    c.add_argument("--systems", metavar="FILE",
                   help="compare every measured system of a systems file (e.g. calibration/systems.yaml) on its "
                        "preset, with the geometric-mean |error| pooled per system")
    c.add_argument("--system", action="append", metavar="NAME", help="with --systems: only this system (repeatable)")
    c.add_argument("--nodes", type=NODES, default=None, help="nodes the run used (default: as few as hold the ranks)")
    c.add_argument("--ranks", type=RANKS, default=None, help="ranks, when the log does not say (default: from the "
                                                            "device lines or busbw/algbw)")
    c.add_argument("--collective", help="the collective, when the log does not say")
    c.add_argument("--algo", help="force an algorithm (as NCCL_ALGO), e.g. ring for a log run with NCCL_ALGO=RING")
    c.add_argument("--proto", help="force a protocol (LL, LL128, Simple)")
    c.add_argument("--in-place", action="store_true", help="compare the in-place times (default: out-of-place)")
    c.add_argument("--table", type=whole(0), default=None, help="only the K-th table of each log (0-based)")
    c.add_argument("--plot", nargs="?", const="", default=None, metavar="PNG",
                   help="also draw measured and predicted busbw (default file: <log>-compare.png)")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    c.set_defaults(func=cmd_compare)
