# Look-alike of https://github.com/helmholtz-analytics/heat/blob/v1.5.1/heat/core/factories.py#L151
# part 2: `array()` all-reduces the local shapes only for data that is already split
# (`is_split` given); the parameter is passed through `sanitize_axis`, which keeps a None None.
# expect: none
import numpy as np
from mpi4py import MPI

from stride import sanitize_axis


def array(obj, split=None, is_split=None, comm=None):
    split = sanitize_axis(obj.shape, split)
    is_split = sanitize_axis(obj.shape, is_split)
    comm = comm if comm is not None else MPI.COMM_WORLD
    lshape = np.array(obj.shape)
    if comm.size == 1 or split is None and is_split is None:
        split = is_split if is_split is not None else split
    elif split is not None:
        obj = obj[comm.rank::comm.size]
    elif is_split is not None:
        reduction_buffer = np.array(lshape[is_split])
        comm.Allreduce(MPI.IN_PLACE, reduction_buffer, MPI.MIN)
        if reduction_buffer < 0:
            raise ValueError("local shapes do not agree")
    return obj, split
