"""torch's own DeviceMesh in a launched rank, its groups simcomm's.

torch.distributed.device_mesh imported c10d's functions by name when it was loaded; in a rank, those that start a
rendezvous or make groups (init_process_group, new_group) are the launch's own, so every mesh group is a
SimProcessGroup registered in the rank's c10d world (c10d.py), which DTensor, FSDP2 and the pipelining stages then
use as they use a real group. A mesh of "cuda" devices is a mesh of the device the script's "cuda" tensors live on
here (the CPU), so that torch places its buffers and picks its streams for where the tensors are.

What still reaches torch's own process-group setup from inside a launch stops with an error saying so.
"""
from __future__ import annotations

import functools
import types

import torch
import torch.distributed as tdist
import torch.distributed.device_mesh as tmesh
from torch.distributed.fsdp._fully_shard import _fsdp_param_group as fsdp_param_group

from ...errors import DistError
from .context import current_context


def _torch_c10d_init(original):
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if current_context() is None:
            return original(*args, **kwargs)
        raise DistError("torch's own process-group setup (torch.distributed.distributed_c10d.init_process_group) "
                        "was reached from inside a simcomm launch, which serves torch.distributed's functions, "
                        "DeviceMesh, DTensor, FSDP2 and DistributedDataParallel with simcomm's groups: something in "
                        "the script sets up torch's C++ process groups another way")
    return wrapper


def _mesh_device(device_type: str) -> str:
    ctx = current_context()
    if ctx is None or str(device_type).split(":")[0] != "cuda":
        return device_type
    return ctx.world.options.cuda_as


def _init_device_mesh(original):
    @functools.wraps(original)
    def init_device_mesh(device_type, *args, **kwargs):
        return original(_mesh_device(device_type), *args, **kwargs)
    return init_device_mesh


def _mesh_init(original):
    @functools.wraps(original)
    def __init__(self, device_type, *args, **kwargs):
        original(self, _mesh_device(device_type), *args, **kwargs)
    return __init__


def patches() -> list[tuple[object, str, object]]:
    """(owner, name, replacement) for every attribute this module patches; torch.distributed's own functions must
    be patched first (their launch versions are what the mesh module is given)."""
    out = [(tmesh, name, getattr(tdist, name)) for name in ("init_process_group", "new_group")]
    init = _init_device_mesh(tmesh.init_device_mesh)
    out += [(tmesh, "init_device_mesh", init), (tdist, "init_device_mesh", init),
            (tmesh.DeviceMesh, "__init__", _mesh_init(tmesh.DeviceMesh.__init__))]
    c10d = tdist.distributed_c10d
    out.append((c10d, "init_process_group", _torch_c10d_init(c10d.init_process_group)))
    out.append((torch, "meta", _meta_device_module()))
    group = fsdp_param_group.FSDPParamGroup
    out.append((group, "_validate_no_meta_params", _meta_params_allowed(group._validate_no_meta_params)))
    return out


def _meta_device_module():
    """torch.meta, the device module torch looks a mesh's device type up as (torch.cuda for "cuda"): the CPU's
    streams and events, device 0."""
    module = types.ModuleType("torch.meta")
    module.__dict__.update({k: v for k, v in vars(torch.cpu).items() if not k.startswith("__")})
    module.current_device = lambda: 0
    return module


def _meta_params_allowed(original):
    """FSDP2 refuses to run on parameters that are still on the meta device; under --cuda-as meta that is what
    every parameter is, and its collectives and compute are costed by size alone."""
    @functools.wraps(original)
    def validate(self):
        ctx = current_context()
        if ctx is None or ctx.world.options.cuda_as != "meta":
            original(self)
    return validate
