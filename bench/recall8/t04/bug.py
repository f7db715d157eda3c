# Repository: https://github.com/firedrakeproject/firedrake
# Commit (before fix): 18c3c282831b4775ee74e7f9239c948bacf079c2
# Files excerpted: firedrake/mesh.py (_pic_swarm_in_mesh, _parent_mesh_embedding, _on_rank_vertices)
#   plus the collective property it reaches, from https://github.com/OP2/PyOP2
#   pyop2/types/dat.py (Dat.data_ro_with_halos, Dat.global_to_local_begin/end; trimmed)
import numpy as np
from mpi4py import MPI
from pyop2 import mpi
from pyop2.types.access import Access

IntType = np.int32
RealType = np.float64


# ---- PyOP2: pyop2/types/dat.py (trimmed) ----
class Dat:
    @property
    @mpi.collective
    def data_ro_with_halos(self):
        self.global_to_local_begin(Access.READ)
        self.global_to_local_end(Access.READ)
        v = self._data.view()
        v.setflags(write=False)
        return v

    @mpi.collective
    def global_to_local_begin(self, access_mode):
        """Begin a halo exchange from global to ghosted representation."""
        halo = self.dataset.halo
        if halo is None or self._halo_frozen:
            return
        if not self.halo_valid and access_mode in {Access.READ, Access.RW}:
            halo.global_to_local_begin(self, Access.WRITE)

    @mpi.collective
    def global_to_local_end(self, access_mode):
        halo = self.dataset.halo
        if halo is None or self._halo_frozen:
            return
        if not self.halo_valid and access_mode in {Access.READ, Access.RW}:
            halo.global_to_local_end(self, Access.WRITE)
            self.halo_valid = True


# ---- firedrake/mesh.py ----
def _pic_swarm_in_mesh(parent_mesh, coords, fields=None, tolerance=None, redundant=True):
    # Check coords
    coords = np.asarray(coords, dtype=RealType)

    if redundant:
        coords = parent_mesh._comm.bcast(coords, root=0)

    coords, reference_coords, parent_cell_nums = \
        _parent_mesh_embedding(coords, parent_mesh, tolerance)
    ...


def _parent_mesh_embedding(vertex_coords, parent_mesh, tolerance):
    """Find the parent cells and local coords for vertices on this rank.

    Vertices not located in cells owned by this rank are discarded.
    """
    if len(vertex_coords) > 0:
        vertex_coords = _on_rank_vertices(vertex_coords, parent_mesh)

    num_vertices = len(vertex_coords)
    max_num_vertices = parent_mesh._comm.allreduce(num_vertices, op=MPI.MAX)

    gdim = parent_mesh.geometric_dimension()
    tdim = parent_mesh.topological_dimension()

    parent_cell_nums = np.empty(num_vertices, dtype=IntType)
    reference_coords = np.empty((num_vertices, tdim), dtype=RealType)
    valid = np.full(num_vertices, False)

    # Create an out of mesh point to use in locate_cell when needed
    out_of_mesh_point = np.full((1, gdim), np.inf)

    for i in range(max_num_vertices):
        if i < num_vertices:
            parent_cell_num, reference_coord = \
                parent_mesh.locate_cell_and_reference_coordinate(vertex_coords[i], tolerance)
            if parent_cell_num is not None and parent_cell_num < parent_mesh.cell_set.size:
                valid[i] = True
                parent_cell_nums[i] = parent_cell_num
                reference_coords[i] = reference_coord
        else:
            parent_mesh.locate_cell(out_of_mesh_point)  # should return None

    vertex_coords = np.compress(valid, vertex_coords, axis=0)
    reference_coords = np.compress(valid, reference_coords, axis=0)
    parent_cell_nums = np.compress(valid, parent_cell_nums, axis=0)

    return vertex_coords, reference_coords, parent_cell_nums


def _on_rank_vertices(vertex_coords, parent_mesh):
    """Discard those vertices that are definitely not on this MPI rank."""
    bounding_box_min = parent_mesh.coordinates.dat.data_ro_with_halos.min(axis=0, initial=np.inf)
    bounding_box_max = parent_mesh.coordinates.dat.data_ro_with_halos.max(axis=0, initial=-np.inf)
    length_scale = (bounding_box_max - bounding_box_min).max()
    # This is basically to avoid roundoff, so 1% is very conservative.
    bounding_box_min -= 0.01 * length_scale
    bounding_box_max += 0.01 * length_scale

    on_rank = (vertex_coords < bounding_box_max).all(axis=1) \
        | (vertex_coords > bounding_box_min).all(axis=1)

    return np.compress(on_rank, vertex_coords, axis=0)
