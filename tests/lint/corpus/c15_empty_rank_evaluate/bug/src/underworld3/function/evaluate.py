# Source: https://github.com/underworldcode/underworld3/issues/611 (root cause tracked in #314, #513)
# Bug: global_evaluate returns early on a rank that received no query points; the ranks with
#      points enter the migration's alltoall and wait for it. Which rank is empty depends on
#      how the points fall on the domain decomposition.
# Class: emptiness of a per-rank array (coords.shape[0] == 0); src/ layout, `from underworld3
#        import swarm` resolved to src/underworld3/swarm.py
# expect: HK202 collective=src/underworld3/swarm.py:10|src/underworld3/function/evaluate.py:16 branch=src/underworld3/function/evaluate.py:14
import numpy

from underworld3 import swarm


def global_evaluate(expr, coords, owner_of):
    if coords.shape[0] == 0:
        return numpy.zeros((0, 1))
    local = swarm.migrate(coords, owner_of)
    return expr(local)
