# Look-alike of https://github.com/underworldcode/underworld3/issues/611: the emptiness test
# comes after the collective and decides only local work.
# expect: none
import numpy

from underworld3 import swarm


def global_evaluate(expr, coords, owner_of):
    local = swarm.migrate(coords, owner_of)
    values = numpy.zeros((local.shape[0], 1))
    if local.shape[0] > 0:
        values = expr(local)
    return values
