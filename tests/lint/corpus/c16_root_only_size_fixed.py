# Source: https://github.com/INM-6/hybridLFPy/issues/36 (fix: broadcast the shape before summing)
# expect: none
import numpy
from mpi4py import MPI

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()


def calc_signal_sum(cells, n_cells_total):
    shape = numpy.shape(cells[0].signal) if RANK == 0 else None
    shape = COMM.bcast(shape, root=0)
    data = numpy.zeros(shape)
    for c in cells:
        data += c.signal
    out = numpy.zeros(shape) if RANK == 0 else None
    COMM.Reduce(data, out, op=MPI.SUM, root=0)
    return out
