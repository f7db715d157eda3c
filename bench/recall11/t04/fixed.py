# Repository: hpc4cmb/toast
# After the fix: fa63ecaec7039377e8c800dd9971170123b47b65 (PR #395)
# Files excerpted: src/toast/ops/mapmaker_utils.py (BuildNoiseWeighted._exec / _finalize),
#                  src/toast/pixels.py (PixelDistribution.__eq__, PixelData.sync_allreduce), shortened
import numpy as np
from mpi4py import MPI


# ---- src/toast/pixels.py ----
class PixelDistribution(object):
    def __init__(self, n_pix, n_submap, local_submaps, comm):
        self._n_pix = n_pix
        self._n_submap = n_submap
        self._local_submaps = local_submaps
        self._comm = comm

    def __eq__(self, other):
        local_eq = True
        if self._n_pix != other._n_pix:
            local_eq = False
        if not np.array_equal(self._local_submaps, other._local_submaps):
            local_eq = False
        return local_eq

    def __ne__(self, other):
        return not self.__eq__(other)


class PixelData(object):
    def __init__(self, dist, dtype, n_value=1):
        self._dist = dist
        self._n_value = n_value
        self.distribution = dist
        self.n_value = n_value

    def sync_allreduce(self, comm_bytes=10000000):
        if self._dist._comm is None:
            return
        send = np.zeros(self._n_value)
        recv = np.zeros(self._n_value)
        self._dist._comm.Allreduce(send, recv, op=MPI.SUM)


# ---- src/toast/ops/mapmaker_utils.py ----
class BuildNoiseWeighted(object):
    zmap = "zmap"
    pixel_dist = "pixel_dist"
    weights = "weights"

    def _exec(self, data, detectors=None, **kwargs):
        dist = data[self.pixel_dist]
        zmap = None
        weight_nnz = None

        # create / check the map on every process before looping over observations
        if self.zmap in data:
            if data[self.zmap].distribution != dist:
                raise RuntimeError("Existing zmap has different data distribution")
            zmap = data[self.zmap]
            weight_nnz = zmap.n_value
        else:
            # The first global process checks its data shape and broadcasts
            if data.comm.world_rank == 0:
                first_detwt = data.obs[0].detdata[self.weights][0]
                if len(first_detwt.shape) == 1:
                    weight_nnz = 1
                else:
                    weight_nnz = first_detwt.shape[1]
            if data.comm.comm_world is not None:
                weight_nnz = data.comm.comm_world.bcast(weight_nnz, root=0)
            data[self.zmap] = PixelData(dist, np.float64, n_value=weight_nnz)
            zmap = data[self.zmap]

        for ob in data.obs:
            # Get the detectors we are using for this observation
            dets = ob.select_local_detectors(detectors)
            if len(dets) == 0:
                # Nothing to do for this observation
                continue
            wts = ob.view["all"].detdata[self.weights]
            for wview in wts:
                for det in dets:
                    if len(wview.detector_shape) == 1:
                        check_nnz = 1
                    else:
                        check_nnz = wview.detector_shape[1]
                    if check_nnz != weight_nnz:
                        raise RuntimeError("pointing weights have inconsistent number of values")
                    # ... accumulate this detector into zmap ...
        return

    def _finalize(self, data, **kwargs):
        if self.zmap in data:
            # We have called exec() at least once
            data[self.zmap].sync_allreduce()
        return
