# Look-alike of https://github.com/helmholtz-analytics/heat/blob/v1.5.1/heat/core/types.py#L731
# (a false alarm of the blind check on heat 1.5.1, behind 21 of its 66 findings): `can_cast`
# looks a dtype up and, when that raises TypeError, looks up the type of the value instead.
# Whether the lookup raises is a question about the type of what it is given, answered the same
# way on every rank: the in-place operator raises on every rank or on none before the
# all-reduce.
# expect: none
from mpi4py import MPI

comm = MPI.COMM_WORLD

_CODES = {bool: 0, int: 1, float: 2}
_SAFE = [[True, True, True], [False, True, True], [False, False, True]]


def canonical(kind):
    if kind in _CODES:
        return kind
    raise TypeError("data type %r is not understood" % (kind,))


def can_cast(from_, to):
    try:
        code_from = _CODES[canonical(from_)]
    except TypeError:
        code_from = _CODES[canonical(type(from_))]
    return _SAFE[code_from][_CODES[canonical(to)]]


def add_(t1, t2, buf):
    if not can_cast(t2.dtype, t1.dtype):
        raise TypeError("cannot cast %r to %r in place" % (t2, t1))
    comm.Allreduce(MPI.IN_PLACE, buf, MPI.SUM)
    return buf
