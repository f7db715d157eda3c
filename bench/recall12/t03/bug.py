# Repository: simonsobs/sotodlib
# Commit before the fix: 728d0377ca5d922d0302b969081bf87f0766c2a0 (before a8a1518e / 9f8aa9fc, PR #1599;
#                        the hang came in with 7302c92c "mlmapmaker TOAST: Fix wrong timing log")
# Files excerpted: sotodlib/toast/ops/mlmapmaker.py (MLMapmaker._exec / _wrap_obs),
#                  and, from hpc4cmb/toast, toast/utils.py (Logger.info_rank with a timer), shortened
import numpy as np
from mpi4py import MPI
from toast.ops import Operator
from toast.timing import Timer
from toast.utils import Logger


def info_rank(msg, comm=None, rank=0, timer=None):
    """Shape of toast.utils Logger.info_rank: collective when a timer is given."""
    log = Logger.get()
    my_rank = 0 if comm is None else comm.rank
    if timer is not None:
        if comm is not None:
            comm.barrier()
        timer.stop()
    if my_rank == rank:
        if timer is not None:
            msg = f"{msg} {timer.seconds():0.2f} s"
        log.info(msg)
    if timer is not None:
        timer.clear()
        timer.start()


class MLMapmaker(Operator):
    def _wrap_obs(self, ob, dets, passinfo, comm):
        """ Prepare data for the mapmaker """
        timer = Timer()
        timer.start()
        nsample = int(ob.n_local_samples)
        axobs = {
            "signal": np.vstack(ob.detdata[self.det_data][dets, :]),
            "timestamps": ob.shared[self.times].data,
            "nsamp": nsample,
        }
        if self.downsample != 1:
            axobs = self.downsample_obs(axobs, passinfo.downsample)
        info_rank("MLMapmaker wrapped observations in", comm=comm, timer=timer)
        return axobs

    def _exec(self, data, detectors=None, **kwargs):
        timer = Timer()
        comm = data.comm.comm_world
        gcomm = data.comm.comm_group
        timer.start()

        if data.comm.group_size != 1:
            raise RuntimeError(
                "The ML mapmaker requires the TOAST process group size to be exactly one."
            )
        # every process is its own group: data.obs holds this process's observations only
        num_obs = np.array(comm.allgather(len(data.obs))) if comm is not None else np.array([len(data.obs)])
        if np.any(num_obs == 0):
            raise RuntimeError("Some TOAST groups have no observation.")

        passes = self.setup_passes()
        mapmaker_prev = None
        eval_prev = None
        for ipass, passinfo in enumerate(passes):
            info_rank(f"Starting pass {ipass + 1}/{len(passes)}", comm=comm)
            mapmaker = self.make_mapmaker(comm, passinfo)

            for ob in data.obs:
                # Get the detectors we are using locally for this observation
                dets = ob.select_local_detectors(detectors)
                if len(dets) == 0:
                    # Nothing to do for this observation
                    continue

                nmat, nmat_file = self._load_noise_model(ob, len(passes), ipass, gcomm)
                axobs = self._wrap_obs(ob, dets, passinfo, comm)
                self._add_obs(mapmaker, ob.name, axobs, nmat, None)
                del axobs
                self._save_noise_model(mapmaker, nmat, nmat_file, gcomm)

            if comm is not None:
                comm.barrier()

            x0 = self._init_mapmaker(mapmaker, mapmaker_prev, eval_prev, comm, gcomm)
            mapmaker_prev, eval_prev = self._apply_mapmaker(mapmaker, x0, passinfo, comm)
        return
