"""torch.distributed.device_mesh for a launched rank, and a clear stop where torch's own process groups are reached.

torch's DeviceMesh keeps its groups in torch's C++ registry and, on a rank that has not set up torch's own default
group, starts a real rendezvous, which would wait forever for peers that are not there. In a rank, DeviceMesh and
init_device_mesh are simcomm's (simcomm.distributed.device_mesh: the same API, its groups simcomm's, usable with
every collective); anything else that reaches torch's own init_process_group (DTensor, FSDP2) stops with an error
saying so.
"""
from __future__ import annotations

import functools

import torch.distributed as tdist
import torch.distributed.device_mesh as tmesh

from ...errors import DistError
from .context import current_context
from .dist import served


def _torch_c10d_init(original):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if current_context() is None:
            return original(*args, **kwargs)
        raise DistError("torch's own process-group setup (torch.distributed.distributed_c10d.init_process_group) "
                        "was reached from inside a simcomm launch: something in the script uses torch's C++ "
                        "process groups directly (DTensor and FSDP2 do), which simcomm does not serve; "
                        "torch.distributed's functions, DistributedDataParallel and DeviceMesh with its groups "
                        "are served")
    return wrapper


def _mesh_class(original: type) -> type:
    """A stand-in for torch's DeviceMesh class: constructed in a rank it makes simcomm's mesh, elsewhere torch's.
    It stays a class (torch's modules use the name in type unions) and a subclass of torch's."""
    make = served("DeviceMesh", original)

    class DeviceMesh(original):
        def __new__(cls, *args, **kwargs):
            return make(*args, **kwargs)
    DeviceMesh.__doc__, DeviceMesh.__module__, DeviceMesh.__qualname__ = (original.__doc__, original.__module__,
                                                                         original.__qualname__)
    return DeviceMesh


def patches() -> list[tuple[object, str, object]]:
    """(owner, name, replacement) for every attribute this module patches."""
    out = []
    mesh_class = _mesh_class(tmesh.DeviceMesh)
    for owner in (tmesh, tdist):
        out.append((owner, "init_device_mesh", served("init_device_mesh", tmesh.init_device_mesh)))
        out.append((owner, "DeviceMesh", mesh_class))
    c10d = tdist.distributed_c10d
    out.append((c10d, "init_process_group", _torch_c10d_init(c10d.init_process_group)))
    return out
