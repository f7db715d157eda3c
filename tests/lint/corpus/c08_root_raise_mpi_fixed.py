# Source: https://github.com/mphowardlab/relentless/issues/221 (abort the whole job when the root fails)
# expect: none
import numpy
from mpi4py import MPI

from relentless import mpi


def _pack_particles(seed, N, V, diameters):
    rng = numpy.random.default_rng(seed)
    volume = numpy.sum(numpy.pi / 6 * diameters**3)
    if volume / V > 0.6:
        raise ValueError("Packing fraction is too high to pack particles")
    return rng.uniform(0, V ** (1 / 3), size=(N, 3))


def initialize(seed, N, V, diameters):
    positions = None
    if mpi.world.rank_is_root:
        try:
            positions = _pack_particles(seed, N, V, diameters)
        except ValueError:
            MPI.COMM_WORLD.Abort(1)
            raise
    positions = mpi.world.bcast(positions)
    return positions
