"""DeviceMesh and init_device_mesh for 1-D and 2-D meshes: the ranks laid out in a grid, one process group per
row and column (torch.distributed.device_mesh's behaviour for the simulated world)."""
from __future__ import annotations

import numpy as np

from ..errors import DistError
from .api import get_rank, get_world_size, new_group
from .groups import as_rank


class DeviceMesh:
    """ranks in an n-d grid (`mesh`); get_group(dim) is this rank's group along dimension dim."""

    def __init__(self, device_type: str, mesh=None, *, mesh_dim_names=None, backend_override=None,
                 _init_backend=True, _rank=None, _layout=None, _rank_map=None, _root_mesh=None):
        grid = np.asarray(mesh if not hasattr(mesh, "numpy") else mesh.numpy())
        if grid.ndim not in (1, 2) or grid.size == 0 or grid.dtype.kind not in "iu":
            raise DistError(f"DeviceMesh: simcomm builds 1-D and 2-D meshes of integer ranks, got {mesh!r}")
        ranks = sorted(grid.reshape(-1).tolist())
        if ranks != list(range(get_world_size())):
            raise DistError(f"DeviceMesh: the mesh must hold every rank 0..{get_world_size() - 1} once, got "
                            f"{grid.tolist()}")
        names = tuple(mesh_dim_names) if mesh_dim_names is not None else None
        if names is not None and (len(names) != grid.ndim or len(set(names)) != len(names)):
            raise DistError(f"DeviceMesh: mesh_dim_names {names} must name each of the {grid.ndim} dimensions once")
        self.device_type, self.mesh, self.mesh_dim_names = device_type, grid, names
        me = get_rank()
        self._coordinate = tuple(int(i) for i in np.argwhere(grid == me)[0])
        self._groups = []
        for dim in range(grid.ndim):  # every rank makes every group, in the same order (new_group is collective)
            lines = np.moveaxis(grid, dim, -1).reshape(-1, grid.shape[dim])
            made = [new_group(line.tolist(), sort_ranks=False) for line in lines]
            self._groups.append(next(g for g, line in zip(made, lines) if me in line.tolist()))

    @property
    def ndim(self) -> int:
        return self.mesh.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.mesh.shape)

    def _dim(self, mesh_dim) -> int:
        if mesh_dim is None:
            if self.ndim != 1:
                raise DistError("Found the DeviceMesh have 2 dimensions; pass mesh_dim to choose one")
            return 0
        if isinstance(mesh_dim, str):
            if not self.mesh_dim_names or mesh_dim not in self.mesh_dim_names:
                raise DistError(f"Mesh dimension '{mesh_dim}' does not exist; names are {self.mesh_dim_names}")
            return self.mesh_dim_names.index(mesh_dim)
        dim = as_rank(mesh_dim, "mesh_dim")
        if not 0 <= dim < self.ndim:
            raise DistError(f"mesh_dim {dim} is out of range for a {self.ndim}-D mesh")
        return dim

    def get_group(self, mesh_dim=None):
        return self._groups[self._dim(mesh_dim)]

    def get_all_groups(self) -> list:
        return list(self._groups)

    def size(self, mesh_dim=None) -> int:
        return int(self.mesh.size) if mesh_dim is None else int(self.mesh.shape[self._dim(mesh_dim)])

    def get_rank(self) -> int:
        return get_rank()

    def get_local_rank(self, mesh_dim=None) -> int:
        return self._coordinate[self._dim(mesh_dim)]

    def get_coordinate(self) -> tuple[int, ...]:
        return self._coordinate

    def __getitem__(self, name: str) -> "_SubMesh":
        return _SubMesh(self, self._dim(name))

    def __repr__(self) -> str:
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', {self.mesh.tolist()}{names})"


class _SubMesh:
    """mesh["dp"]: one dimension of a mesh, seen as a 1-D mesh."""

    def __init__(self, parent: DeviceMesh, dim: int):
        self._parent, self._dim = parent, dim
        self.device_type, self.ndim = parent.device_type, 1
        self.mesh_dim_names = (parent.mesh_dim_names[dim],) if parent.mesh_dim_names else None

    def get_group(self, mesh_dim=None):
        return self._parent.get_group(self._dim)

    def size(self, mesh_dim=None) -> int:
        return self._parent.size(self._dim)

    def get_local_rank(self, mesh_dim=None) -> int:
        return self._parent.get_local_rank(self._dim)


def init_device_mesh(device_type: str, mesh_shape, *, mesh_dim_names=None, backend_override=None) -> DeviceMesh:
    """A DeviceMesh of the world's ranks in row-major order with the given 1-D or 2-D shape."""
    shape = tuple(as_rank(s, "mesh_shape") for s in mesh_shape)
    n = get_world_size()
    if int(np.prod(shape)) != n:
        raise DistError(f"init_device_mesh: mesh_shape {shape} holds {int(np.prod(shape))} ranks; the world has {n}")
    return DeviceMesh(device_type, np.arange(n).reshape(shape), mesh_dim_names=mesh_dim_names)
