# Source: https://github.com/ICHEC/QNLP/pull/5 (every rank calls print_states; it prints on
# rank 0 only)
# expect: none
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()


def print_states(sim):
    local = sim.getStateVector()
    full = comm.gather(local, root=0)
    if rank == 0:
        print(full)


def report(sim):
    print_states(sim)
