# Look-alike of https://github.com/helmholtz-analytics/heat/blob/v1.5.1/heat/core/linalg/qr.py#L250
# (a false alarm of the blind check on heat 1.5.1): each rank splits the world into groups of
# leaves and, when its group has more than one member, broadcasts within it. The size of a
# group is the same on each of its members, and only they take part in its broadcasts: every
# member enters the branch or none does.
# expect: none
from mpi4py import MPI


def merge_levels(q_loc, procs_to_merge, levels, mode="reduced"):
    world = MPI.COMM_WORLD
    for level in range(1, levels + 1):
        leave_comm = world.Split(world.rank // procs_to_merge**level, world.rank)
        if mode == "reduced" and leave_comm.size > 1:
            shape = q_loc.shape if leave_comm.rank == 0 else None
            shape = leave_comm.bcast(shape, root=0)
            if shape is not None:
                leave_comm.Bcast(q_loc, root=0)
        leave_comm.Free()
    world.Barrier()
    return q_loc
