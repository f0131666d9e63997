"""DeviceMesh and init_device_mesh: the ranks laid out in an n-D grid, one process group per slice along each
dimension (torch.distributed.device_mesh's behaviour for the simulated world)."""
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
        if grid.ndim < 1 or grid.size == 0 or grid.dtype.kind not in "iu":
            raise DistError(f"DeviceMesh: the mesh must be an n-D array of integer ranks, got {mesh!r}")
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
                raise DistError(f"Found the DeviceMesh have {self.ndim} dimensions; pass mesh_dim to choose one")
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

    def __getitem__(self, names) -> "_SubMesh":
        """mesh["tp"] or mesh["dp", "tp"]: this rank's slice of the named dimensions, in the order given."""
        names = (names,) if isinstance(names, str) else tuple(names)
        dims = [self._dim(n) for n in names]
        if len(set(dims)) != len(dims):
            raise DistError(f"DeviceMesh: {names} names a dimension twice")
        return _SubMesh(self, tuple(dims))

    def __repr__(self) -> str:
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', {self.mesh.tolist()}{names})"


class _SubMesh(DeviceMesh):
    """Some dimensions of a mesh, as the mesh that holds this rank: its groups are the parent's along them."""

    def __init__(self, parent: DeviceMesh, dims: tuple[int, ...]):
        # not DeviceMesh.__init__: that makes new groups, a collective call the other ranks would not match
        index = tuple(slice(None) if d in dims else c for d, c in enumerate(parent.get_coordinate()))
        kept = [d for d in range(parent.ndim) if d in dims]  # the dimensions left by the index, in the mesh's order
        self.device_type = parent.device_type
        self.mesh = np.transpose(parent.mesh[index], [kept.index(d) for d in dims])
        self.mesh_dim_names = tuple(parent.mesh_dim_names[d] for d in dims) if parent.mesh_dim_names else None
        self._coordinate = tuple(parent.get_coordinate()[d] for d in dims)
        self._groups = [parent.get_group(d) for d in dims]


def init_device_mesh(device_type: str, mesh_shape, *, mesh_dim_names=None, backend_override=None) -> DeviceMesh:
    """A DeviceMesh of the world's ranks in row-major order with the given shape."""
    shape = tuple(as_rank(s, "mesh_shape") for s in mesh_shape)
    n = get_world_size()
    if int(np.prod(shape)) != n:
        raise DistError(f"init_device_mesh: mesh_shape {shape} holds {int(np.prod(shape))} ranks; the world has {n}")
    return DeviceMesh(device_type, np.arange(n).reshape(shape), mesh_dim_names=mesh_dim_names)
