"""simcomm: a discrete-event simulator of message passing for distributed deep learning."""
from .distributed.tensors import SizeOnly, size_only
from .errors import AlgorithmError, DeadlockError, DistError, MismatchError, RankFailed, SimcommError
from .hardware import Cluster, build_cluster, list_presets
from .distributed import clock
from .distributed.spawn import SpawnResult, spawn
from .session import Session
from .collective import simulate_collective

__version__ = "0.1.0"

__all__ = ["AlgorithmError", "Cluster", "clock", "DeadlockError", "DistError", "MismatchError", "RankFailed",
           "Session", "SimcommError", "SizeOnly", "SpawnResult", "__version__", "build_cluster", "list_presets",
           "simulate_collective", "size_only", "spawn"]
