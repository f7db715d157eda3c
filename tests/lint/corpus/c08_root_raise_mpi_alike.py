# Look-alike of relentless' own tests (mpi.world.rank_is_root then bcast outside the branch) and
# of its directory setter (a rank-dependent keyword argument, then a barrier on every rank).
# expect: none
import tempfile

from relentless import data, mpi


class Run:
    def setUp(self):
        if mpi.world.rank_is_root:
            self._tmp = tempfile.TemporaryDirectory()
            directory = self._tmp.name
        else:
            directory = None
        self.directory = mpi.world.bcast(directory)

    def set_directory(self, value):
        if value is not None:
            value = data.Directory.cast(value, create=mpi.world.rank_is_root)
            mpi.world.barrier()
        self._directory = value
