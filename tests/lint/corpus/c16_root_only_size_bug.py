# Source: https://github.com/INM-6/hybridLFPy/issues/36 ("broadcast shape to all MPI threads before summing")
# Bug: every rank reaches the Reduce, but a rank that holds no cells sizes its buffer from a
#      default shape; with MPI.SIZE > number of cells the buffers disagree and the sum hangs.
# Class: every rank reaches the collective, its size argument is computed under a rank-dependent branch
# expect: HK107 collective=19 branch=14
import numpy
from mpi4py import MPI

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()


def calc_signal_sum(cells, n_cells_total):
    if RANK < n_cells_total:
        data = numpy.sum([c.signal for c in cells], axis=0)
    else:
        data = numpy.zeros((1, 1))
    out = numpy.zeros_like(data) if RANK == 0 else None
    COMM.Reduce(data, out, op=MPI.SUM, root=0)
    return out
