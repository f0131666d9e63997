"""Adapters to real backends: run a simcomm rank program on real torch.distributed and compare the two.

`run_real(fn, args, nprocs, backend="gloo")` runs fn(rank, torch.distributed, *args) in spawned processes;
`compare(fn, args, nprocs)` runs fn(rank, dist, *args) on simcomm (gloo numerics) and on real gloo and reports,
per rank, whether the results are bitwise equal and their max abs diff. torch is imported only when used.
"""
from .torch_runner import (
                           TORCH_HINT,
                           Comparison,
                           NoGPUs,
                           RankComparison,
                           RealRankFailed,
                           RealRunError,
                           RealRunTimeout,
                           bitwise_equal,
                           check_gpus,
                           compare,
                           diff,
                           free_port,
                           require_torch,
                           run_real,
                           run_simulated,
)

__all__ = ["TORCH_HINT", "Comparison", "NoGPUs", "RankComparison", "RealRankFailed", "RealRunError",
           "RealRunTimeout", "bitwise_equal", "check_gpus", "compare", "diff", "free_port", "require_torch",
           "run_real", "run_simulated"]
