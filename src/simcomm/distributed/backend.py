"""torch.distributed's backend and environment queries, answered for the simulated cluster."""
from __future__ import annotations

import datetime
import enum
import os

from ..algorithms.reduce_ops import as_reduce_op
from ..errors import DistError
from .api import get_backend
from .runtime import current

default_pg_timeout = datetime.timedelta(minutes=30)  # torch's default for non-NCCL groups


class Backend(str):
    """A backend name, lower-cased as torch's Backend("GLOO") == "gloo"."""

    UNDEFINED, GLOO, NCCL, UCC, MPI, XCCL, FAKE = "undefined", "gloo", "nccl", "ucc", "mpi", "xccl", "fake"
    default_device_backend_map = {"cpu": "gloo", "cuda": "nccl"}

    def __new__(cls, name: str):
        if not isinstance(name, str):
            raise DistError(f"Backend constructor parameter must be string-ish, got {name!r}")
        value = name.lower()
        if value == "undefined":
            raise DistError(f"Invalid backend: '{name}'")
        return super().__new__(cls, value)


class DebugLevel(enum.Enum):
    """TORCH_DISTRIBUTED_DEBUG's levels: simcomm always checks what DETAIL checks (shapes across ranks)."""

    OFF = 0
    INFO = 1
    DETAIL = 2


_debug = [DebugLevel.OFF]


def get_debug_level() -> DebugLevel:
    return _debug[0]


def set_debug_level(level) -> None:
    _debug[0] = DebugLevel(level)


def set_debug_level_from_env() -> None:
    _debug[0] = DebugLevel[os.environ.get("TORCH_DISTRIBUTED_DEBUG", "OFF").upper()]


def _device_kind() -> str:
    rt, _ = current()
    return rt.sim.cluster.device.kind


def is_gloo_available() -> bool:
    return True


def is_nccl_available() -> bool:
    """True on a simulated GPU cluster."""
    try:
        return _device_kind() == "gpu"
    except Exception:  # noqa: BLE001 - outside a rank program: simcomm simulates NCCL
        return True


def is_mpi_available() -> bool:
    return False


def is_ucc_available() -> bool:
    return False


def is_xccl_available() -> bool:
    return False


def is_backend_available(backend: str) -> bool:
    return {"gloo": is_gloo_available, "nccl": is_nccl_available}.get(str(backend).lower(), lambda: False)()


def is_torchelastic_launched() -> bool:
    """simcomm.spawn is not torchrun."""
    return False


def get_default_backend_for_device(device) -> str:
    kind = str(getattr(device, "type", device)).split(":")[0]
    if kind not in Backend.default_device_backend_map:
        raise DistError(f"Default backend not registered for device : {device}")
    return Backend.default_device_backend_map[kind]


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    """This rank's index on its simulated node (what LOCAL_RANK would be)."""
    rt, me = current()
    return me % rt.sim.cluster.ranks_per_node


def get_pg_count() -> int:
    """Process groups made so far, the world included."""
    rt, _ = current()
    return rt.services["groups"].count()


def supports_complex(reduceOp) -> bool:  # noqa: N803 - torch's name
    return as_reduce_op(reduceOp).name not in ("MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR")


def get_backend_config(group=None) -> str:
    """"cpu:gloo" or "cuda:nccl" by the simulated device (or what init_process_group asked for)."""
    backend = get_backend(group)
    return backend if ":" in backend else f"{'cuda' if backend == 'nccl' else 'cpu'}:{backend}"
