# Source: https://github.com/mphowardlab/relentless/issues/221
# Bug: only the root rank packs the initial configuration; when the packing fails it raises,
#      and the other ranks wait for ever in the broadcast the root never reaches.
# Class: rank from an attribute (mpi.world.rank_is_root), project MPI wrapper (mpi.world.bcast),
#        raise inside a helper called under the rank branch
# expect: HK103 collective=24 branch=22
import numpy

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
        positions = _pack_particles(seed, N, V, diameters)
    positions = mpi.world.bcast(positions)
    return positions
