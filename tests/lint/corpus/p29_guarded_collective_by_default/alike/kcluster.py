# Look-alike of https://github.com/helmholtz-analytics/heat/blob/v1.5.1/heat/cluster/_kcluster.py#L140
# part 3: only the rank holding the sample wraps it with `array()`, without `is_split`: that call
# never reaches the all-reduce (it runs only for `is_split` given), so the rank branch skips no
# collective; every rank then takes part in the broadcast.
# expect: none
from factories import array


def first_center(x, comm, sample, displ):
    proc = 0
    for p in range(comm.size):
        if displ[p] > sample:
            break
        proc = p
    x0 = None
    if comm.rank == proc:
        x0, _ = array(x[sample - displ[proc]], comm=comm)
    return comm.bcast(x0, root=proc)
