from . import mpi  # noqa: F401
from . import swarm  # noqa: F401
