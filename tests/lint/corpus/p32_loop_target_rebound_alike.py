# Look-alike of https://github.com/helmholtz-analytics/heat/blob/v1.5.1/heat/core/arithmetics.py#L946
# (a false alarm of the blind check on heat 1.5.1): `diff` walks `[prepend, append]` and turns a
# scalar into a rank-shaped array inside the loop. That array never reaches the next
# iteration's `is not None` test: the loop binds `p_el` again first, to the caller's argument,
# the same on every rank.
# expect: none
from mpi4py import MPI

comm = MPI.COMM_WORLD


def diff(a, prepend=None, append=None, n=4):
    for p, p_el in enumerate([prepend, append]):
        if p_el is not None:
            if isinstance(p_el, (int, float)):
                p_el = [p_el] * (n // comm.size + (comm.rank < n % comm.size))
            elif not isinstance(p_el, list):
                raise TypeError("prepend/append should be a scalar or a list, was %s" % type(p_el))
            a = comm.allgather(p_el + a) if p == 0 else comm.allgather(a + p_el)
    return a
