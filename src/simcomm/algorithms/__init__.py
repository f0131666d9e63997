"""Collective algorithms as plans (schedules of transfers and reductions), protocols, and the tuner."""
from .plan import KINDS, Buffers, Collective, Step, step
from .protocols import PROTOCOLS, Protocol
from .reduce_ops import ReduceOp, make_premul_sum
from .registry import ALGORITHMS, Choice, algorithms_for, register, run_collective
from .tuner import choose, predict

__all__ = ["ALGORITHMS", "KINDS", "PROTOCOLS", "Buffers", "Choice", "Collective", "Protocol", "ReduceOp", "Step",
           "algorithms_for", "choose", "make_premul_sum", "predict", "register", "run_collective", "step"]
