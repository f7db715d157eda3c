# Source: https://github.com/ICHEC/QNLP/pull/5
# Bug: print_states gathers the distributed state vector over the communicator, but the
#      caller runs it on rank 0 only: rank 0 waits in the gather for ranks that never call it.
# Class: a collective one call down from a rank-dependent branch (mpi4py)
# expect: HK101 collective=14|21 branch=20
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()


def print_states(sim):
    local = sim.getStateVector()
    full = comm.gather(local, root=0)
    if rank == 0:
        print(full)


def report(sim):
    if rank == 0:
        print_states(sim)
