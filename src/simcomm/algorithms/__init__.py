"""Collective algorithms: each one an object (plans, cost prediction, "cannot run because"), the tuner that
chooses among them, and the executor that runs a plan on the engine."""
from .base import Algorithm
from .catalog import ALGORITHMS, algorithm, algorithms_for
from ..vocab import KINDS
from .plan import Buffers, Collective, Placement, Step, step
from .protocols import PROTOCOLS, Protocol
from .reduce_ops import ReduceOp, make_premul_sum
from .run import run_collective
from .tuner import Choice, choose, predict

__all__ = ["ALGORITHMS", "KINDS", "PROTOCOLS", "Algorithm", "Buffers", "Choice", "Collective", "Placement",
           "Protocol", "ReduceOp", "Step", "algorithm", "algorithms_for", "choose", "make_premul_sum", "predict",
           "run_collective", "step"]
