# Look-alike of https://github.com/Parallel-in-Time/pySDC/blob/v5.9/pySDC/projects/Performance/controller_MPI_scorep.py#L85
# (a false alarm of the blind check on pySDC 5.9): the list of active steps is built from the
# all-gathered time steps over `range(num_procs)`, the world's size at that line; `num_procs`
# becomes the active group's size only later. Every rank computes the same list and raises or
# none does. (A comprehension's variable, and what it reads, are read where the comprehension
# stands, and do not mix with another comprehension's variable of the same name.)
# expect: none
from mpi4py import MPI


def setup(comm, dt, t0, tend):
    all_dt = comm.allgather(dt)
    num_procs = comm.size
    all_active = [t0 + sum(all_dt[:p]) < tend for p in range(num_procs)]
    if not any(all_active):
        raise RuntimeError("nothing to do, check t0, dt and Tend")
    comm.Barrier()
    active = all_active[comm.rank]
    comm_active = comm.Split(active)
    num_procs = comm_active.Get_size()
    steps = [me for me in range(num_procs)]
    return comm_active, steps
