"""`simcomm launch`: an unmodified torch.distributed script on a simulated cluster (see docs/launch.md)."""
from __future__ import annotations

import argparse
import json
import sys

from ..units import positive, whole
from ..vocab import MAX_RANKS_PER_NODE
from .options import NODES

EXIT_OK, EXIT_SIM = 0, 1


def cmd_launch(args) -> int:
    from ..backends import require_torch
    require_torch()
    from ..backends.launch import launch
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    # a rank's failure propagates: the CLI prints it once, with the rank's own frames (the whole traceback with
    # --debug), as for `simcomm run`
    result = launch(args.script, script_args, args.nproc_per_node, args.nnodes, args.cluster,
                    cuda_as=args.cuda_as, count_flops=args.compute, flop_rate=args.flop_rate, numerics=args.numerics)
    sys.stdout.flush()
    for w in result.worlds:
        elapsed = "failed" if w.elapsed is None else f"{w.elapsed * 1e6:.3f} us simulated"
        sys.stderr.write(f"simcomm launch: {w.kind} world of {w.nprocs} rank{'s' if w.nprocs > 1 else ''} on "
                         f"{w.cluster}: {elapsed}\n")
    if args.summary:
        with open(args.summary, "w") as fh:
            json.dump({"worlds": [w.__dict__ for w in result.worlds]}, fh, indent=2)
    return EXIT_OK if result.ok else EXIT_SIM


def add_parser(sub) -> None:
    la = sub.add_parser("launch", help="run an unmodified torch.distributed script on a simulated cluster",
                        description="Like torchrun (or like python, without --nproc-per-node and --nnodes): "
                                    "runs SCRIPT as nnodes x nproc-per-node ranks (threads) whose "
                                    "torch.distributed calls, CUDA devices, time.sleep and os.environ are served by "
                                    "the simulator. Scripts that call torch.multiprocessing.spawn / Process run "
                                    "those ranks the same way. Prints the simulated time of each world to stderr.")
    la.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node",
                    type=whole(1, MAX_RANKS_PER_NODE, "ranks on one host, as scenarios allow"),
                    default=None,
                    help="ranks per node, as torchrun (with neither this nor --nnodes the script runs as "
                         "`python SCRIPT`: one process, no torchrun variables in its environment; at most "
                         f"{MAX_RANKS_PER_NODE}, as a scenario's host)")
    la.add_argument("--nnodes", type=NODES, default=None, help="nodes, as torchrun (default 1 with --nproc-per-node)")
    la.add_argument("--cluster", required=True, help="preset (see simcomm presets) or a calibrated profile file")
    la.add_argument("--cuda-as", choices=["cpu", "meta"], default="cpu",
                    help="CUDA tensors become CPU tensors with real data (default) or size-only meta tensors")
    la.add_argument("--compute", action="store_true",
                    help="charge torch compute (FLOPs counted by torch.utils.flop_counter) at the GPU's rate")
    la.add_argument("--flop-rate", type=positive(), help="FLOP/s for --compute, e.g. 400e12 (default: the device's "
                                                        "rate)")
    la.add_argument("--numerics", choices=["gloo", "nccl"], help="reduction order (default: by device kind)")
    la.add_argument("--summary", help="write the worlds' simulated times as JSON to this file")
    la.add_argument("script", help="the script torchrun would run")
    la.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    la.set_defaults(func=cmd_launch)
