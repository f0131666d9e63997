"""The process count as launchers give it: an `mpirun`/`srun` command line pasted in front of an nccl-tests binary,
or the environment of a process that a real launcher started.

nccl-tests runs nThreads x nGpus ranks per process and takes the number of processes from MPI, so
`mpirun -np 16 all_reduce_perf -g 1` is 16 ranks. simcomm reads the same counts from the pasted launcher options,
or, run under a real launcher, from the variables it sets (every process then simulates the same run and only
process 0 prints, as nccl-tests prints only on rank 0).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..errors import SimcommError

LAUNCHERS = ("mpirun", "mpiexec", "orterun", "srun")
# Options whose value is the number of processes, and those giving processes (or ranks) per node.
_NP = {"-np", "--np", "-n", "--n", "-c", "--ntasks"}
_PER_NODE = {"-N", "--npernode", "-npernode", "--ntasks-per-node"}
_SRUN_NODES = {"-N", "--nodes"}
# Launcher options that take a value (so that value is not mistaken for the program).
_WITH_VALUE = {"-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile", "-x",
               "--map-by", "-map-by", "--bind-to", "-bind-to", "--rank-by", "-mca", "--mca", "-gmca", "--gmca",
               "--prefix", "-wdir", "--wdir", "-p", "--partition", "-A", "--account", "-t", "--time", "-G",
               "--gpus", "--gpus-per-node", "--gpus-per-task", "-c", "--cpus-per-task", "--export", "-J",
               "--job-name", "--mpi", "--cpu-bind", "--mem", "-o", "--output", "-e", "--error", "-w",
               "--nodelist", "--container-image", "--container-mounts", "-envlist", "-genv", "-env"}
# Variables set by launchers in every process they start: (size, rank, local size).
_ENV = (("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
        ("PMIX_SIZE", "PMIX_RANK", "PMIX_LOCAL_SIZE"),
        ("PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS"),
        ("SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_STEP_TASKS_PER_NODE"))


@dataclass
class Launch:
    """Process counts from a launcher: processes in all, per node (None: fill nodes), nodes (None: as needed),
    this process's rank, NCCL_* variables it exports, and where the counts came from."""

    processes: int | None = None
    per_node: int | None = None
    nodes: int | None = None
    rank: int = 0
    env: dict = field(default_factory=dict)
    source: str = ""
    ignored: list = field(default_factory=list)


def _count(flag: str, value: str, launcher: str) -> int:
    try:
        n = int(value.split(":")[-1] if flag == "--map-by" else value)
    except ValueError:
        raise SimcommError(f"{launcher} {flag}: expected a whole number, found {value!r}") from None
    if n < 1:
        raise SimcommError(f"{launcher} {flag}: expected a number >= 1, found {n}")
    return n


def split_launcher(argv: list[str]) -> tuple[Launch | None, list[str]]:
    """(Launch, the rest) when argv starts with a launcher command line; (None, argv) otherwise.

    The rest starts at the program: an nccl-tests binary (`all_reduce_perf`, `./build/all_gather_perf`) or a
    collective name; a program that is neither is an error naming what was found.
    """
    if not argv or os.path.basename(argv[0]) not in LAUNCHERS:
        return None, argv
    launcher = os.path.basename(argv[0])
    launch = Launch(source=launcher)
    i = 1
    while i < len(argv):
        tok = argv[i]
        flag, eq, inline = tok.partition("=")
        if not tok.startswith("-"):
            break
        value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        takes = flag in _NP | _PER_NODE | _SRUN_NODES | _WITH_VALUE or (flag == "-N" and launcher == "srun")
        if takes and value is None:
            raise SimcommError(f"{launcher} {flag}: expected a value after it")
        if launcher == "srun" and flag in _SRUN_NODES:
            launch.nodes = _count(flag, value, launcher)
        elif flag in _NP and not (flag == "-c" and launcher == "srun"):
            launch.processes = _count(flag, value, launcher)
        elif flag in _PER_NODE:
            launch.per_node = _count(flag, value, launcher)
        elif flag in ("--map-by", "-map-by") and value.startswith("ppr:") and value.endswith(":node"):
            launch.per_node = _count("--map-by", value.rsplit(":", 1)[0], launcher)
        elif flag in ("-x", "-genv", "-env") or flag == "--export":
            for item in (value.split(",") if flag == "--export" else [value]):
                name, has, val = item.partition("=")
                if name.startswith("NCCL_"):
                    launch.env[name] = val if has else os.environ.get(name, "")
        elif flag not in _WITH_VALUE:
            launch.ignored.append(tok)
        i += 1 + (1 if takes and not eq else 0)
    if launch.processes is None and launch.nodes is not None:  # srun -N 2 [--ntasks-per-node 8]
        launch.processes = launch.nodes * (launch.per_node or 1)
    if i >= len(argv):
        raise SimcommError(f"{launcher}: no program after the launcher's options (expected an nccl-tests binary "
                           "such as all_reduce_perf)")
    return launch, argv[i:]


def from_environment(environ=None) -> Launch | None:
    """The Launch of a process started by mpirun/mpiexec/srun (from their variables), or None."""
    environ = os.environ if environ is None else environ
    for size_var, rank_var, local_var in _ENV:
        if size_var in environ and rank_var in environ:
            try:
                size, rank = int(environ[size_var]), int(environ[rank_var])
                local = environ.get(local_var, "").split("(")[0].split(",")[0]
                per_node = int(local) if local else None
            except ValueError:
                raise SimcommError(f"cannot read the launcher's {size_var}={environ[size_var]!r} / "
                                   f"{rank_var}={environ[rank_var]!r} as whole numbers") from None
            if size < 1 or not 0 <= rank < size:
                raise SimcommError(f"the launcher's {size_var}={size} and {rank_var}={rank} do not fit together")
            return Launch(processes=size, per_node=per_node, rank=rank, source=f"{size_var}={size}")
    return None
