"""The lecture's data / tensor / pipeline parallel examples (scenarios/lecture.py), completed (backward and AdamW),
on simcomm or real gloo.

    python examples/training/lecture.py data_parallelism --ranks 4
    python examples/training/lecture.py pipeline_parallelism --ranks 4 --layers 8
    python examples/training/lecture.py tensor_parallelism --ranks 2 --compare    # simcomm vs real gloo, bitwise

Prints each rank's loss per step and what it sent (simcomm), or the comparison with real torch.distributed.
"""
import argparse
import sys
from pathlib import Path

import simcomm
from simcomm.units import format_size
from simcomm.workloads.traffic import bytes_sent

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scenarios"))  # the lecture's programs live there
from lecture import EXAMPLES, run_example  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("example", choices=sorted(EXAMPLES))
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--micro-batches", type=int, default=4, help="pipeline_parallelism only")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--cluster", default="hgx-h100")
    p.add_argument("--compare", action="store_true", help="also run on real gloo (processes) and compare bitwise")
    a = p.parse_args()
    args = (a.batch, a.dim, a.layers) + ((a.micro_batches,) if a.example == "pipeline_parallelism" else ()) + \
        (a.steps, a.lr)
    if a.compare:
        from simcomm.backends.torch_runner import compare
        print(compare(run_example, (a.example, *args), nprocs=a.ranks))
        return
    res = simcomm.spawn(EXAMPLES[a.example], args=args, nprocs=a.ranks, cluster=a.cluster)
    sent = bytes_sent(res.simulation, a.ranks)
    for rank, out in enumerate(res.results):
        losses = " ".join("-" if x is None else f"{x:.6f}" for x in out["loss"])
        print(f"rank {rank}: loss per step {losses}; sent {format_size(sent[rank]['collective'])} in collectives, "
              f"{format_size(sent[rank]['p2p'])} point-to-point")
    print(f"simulated {res.elapsed * 1e6:.1f} us on {res.cluster.name}")


if __name__ == "__main__":
    main()
