# Look-alike of https://github.com/Parallel-in-Time/pySDC/blob/v5.9/pySDC/helpers/stats_helper.py#L52
# (a false alarm of the blind check on pySDC 5.9, behind 32 of its 63 findings): `get_sorted`
# hands its `**kwargs` to `filter_stats`, which all-gathers only when given a communicator.
# Rank 0 of the space communicator sorts its own statistics without one: `comm` is not in
# `kwargs`, so `filter_stats` keeps `comm=None` and no rank waits for it.
# expect: none
from mpi4py import MPI


def filter_stats(stats, comm=None, **kwargs):
    result = {k: v for k, v in stats.items() if all(getattr(k, a, None) == b for a, b in kwargs.items())}
    if comm is not None:
        result = {k: v for part in comm.allgather(result) for k, v in part.items()}
    return result


def get_sorted(stats, sortby="time", **kwargs):
    return sorted((getattr(k, sortby), v) for k, v in filter_stats(stats, **kwargs).items())


def report(stats, space_comm=MPI.COMM_WORLD):
    if space_comm.rank == 0:
        iter_counts = get_sorted(stats, type="niter", sortby="time")
        print(max(v for _, v in iter_counts))
    space_comm.Barrier()
