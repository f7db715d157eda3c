# underworld3: src/underworld3/utilities/_utils.py + discretisation/discretisation_mesh.py (excerpt)
import numpy as np
import underworld3 as uw


def gather_data(val, bcast=False, dtype="float64"):
    """
    gather values on root (bcast=False) or all (bcast = True) processors
    """
    comm = uw.mpi.comm
    rank = uw.mpi.rank

    if isinstance(val, np.ndarray):
        val_local = np.ascontiguousarray(val.copy())
    else:
        val_local = np.array([val], dtype=dtype)

    comm.barrier()

    sendcounts = np.array(comm.gather(len(val_local), root=0))

    if rank == 0:
        val_global = np.zeros((sum(sendcounts)), dtype=dtype)
    else:
        val_global = None

    comm.barrier()
    comm.Gatherv(sendbuf=val_local, recvbuf=(val_global, sendcounts), root=0)
    comm.barrier()

    if uw.mpi.rank == 0:
        val_global = val_global[~np.isnan(val_global)]

    comm.barrier()

    if bcast == True:
        val_global = comm.bcast(val_global, root=0)

    comm.barrier()

    return val_global


class Mesh:

    def __init__(self, dm, radii, centroids):
        self.dm = dm
        self._radii = radii
        self._centroids = centroids

    def get_min_radius(self) -> float:
        """
        This method returns the global minimum distance from any cell centroid to a face.
        """
        all_min_radii = uw.utilities.gather_data(
            np.array((self._radii.min(),)), bcast=True
        )
        return all_min_radii.min()

    def get_max_radius(self) -> float:
        """
        This method returns the global maximum distance from any cell centroid to a face.
        """
        all_max_radii = uw.utilities.gather_data(
            np.array((self._radii.max(),)), bcast=True
        )
        return all_max_radii.max()

    def points_in_domain(self, points, strict_validation=True):
        model_points = np.asarray(points)

        self._mark_local_boundary_faces_inside_and_out()

        max_radius = self.get_max_radius()

        if model_points.shape[0] == 0:
            return np.array([], dtype=bool)

        dist2, closest = self.boundary_face_control_points_kdtree.query(
            model_points, k=1, sqr_dists=True
        )
        in_or_not = self.boundary_face_control_points_sign[closest] > 0
        near_boundary = np.where(dist2 < 2 * max_radius**2)[0]
        in_or_not[near_boundary] = (
            self._get_closest_local_cells_internal(model_points[near_boundary]) != -1
        )
        return in_or_not

    def estimate_dt_scale(self):
        return self.get_min_radius()

    def _mark_local_boundary_faces_inside_and_out(self):
        pass

    def _get_closest_local_cells_internal(self, pts):
        return np.zeros(len(pts), dtype=int)
