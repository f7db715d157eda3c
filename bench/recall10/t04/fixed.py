# caput/mpiutil.py + caput/mpiarray.py (excerpt)
import numpy as np
from mpi4py import MPI

from caput import misc

world = MPI.COMM_WORLD


def split_m(n, m):
    base = (n // m)
    rem = n % m
    part = base * np.ones(m, dtype=int) + (np.arange(m) < rem).astype(int)
    bound = np.cumsum(np.insert(part, 0, 0))
    return np.array([part, bound[:m], bound[1:(m + 1)]])


def split_local(n, comm=world):
    pse = split_m(n, comm.size)
    return pse[:, comm.rank]


class MPIArray(np.ndarray):

    def __new__(cls, global_shape, axis=0, comm=None, *args, **kwargs):
        if comm is None:
            comm = world

        local_num, local_start, local_end = split_local(global_shape[axis], comm=comm)

        lshape = list(global_shape)
        lshape[axis] = local_num

        loffset = [0] * len(global_shape)
        loffset[axis] = local_start

        arr = np.ndarray.__new__(cls, lshape, *args, **kwargs)
        arr._global_shape = global_shape
        arr._axis = axis
        arr._local_shape = tuple(lshape)
        arr._local_offset = tuple(loffset)
        arr._comm = comm
        return arr

    @property
    def global_shape(self):
        return self._global_shape

    @property
    def local_shape(self):
        return self._local_shape

    @property
    def local_offset(self):
        return self._local_offset

    @property
    def axis(self):
        return self._axis

    @property
    def comm(self):
        return self._comm

    @classmethod
    def from_hdf5(cls, f, dataset, comm=None, axis=0):
        fh = misc.open_h5py_mpi(f, 'r', comm)

        dset = fh[dataset]
        dshape = dset.shape
        naxis = len(dshape)
        sel = [slice(None)] * naxis

        dist_arr = cls(dshape, axis=axis, comm=comm, dtype=dset.dtype)

        lstart = dist_arr.local_offset[axis]
        lend = lstart + dist_arr.local_shape[axis]
        sel[axis] = slice(lstart, lend)
        sel = tuple(sel)

        no_null_slices = dist_arr.global_shape[axis] >= dist_arr.comm.size

        if fh.is_mpi and no_null_slices:
            with dset.collective:
                dist_arr[:] = dset[sel]
        else:
            dist_arr[:] = dset[sel]

        if fh.opened:
            fh.close()

        return dist_arr

    def to_hdf5(self, f, dataset, create=False):
        mode = 'a' if create else 'r+'

        fh = misc.open_h5py_mpi(f, mode, self.comm)

        dset = fh.create_dataset(dataset, shape=self.global_shape, dtype=self.dtype)

        start = self.local_offset[self.axis]
        end = start + self.local_shape[self.axis]

        sl = [slice(None, None)] * self.axis
        sl += [slice(start, end)]
        sl = tuple(sl)

        no_null_slices = self.global_shape[self.axis] >= self.comm.size

        if fh.is_mpi and no_null_slices:
            with dset.collective:
                dset[sl] = self[:]
        else:
            dset[sl] = self[:]

        if fh.opened:
            fh.close()
