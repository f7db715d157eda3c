import numpy as np
from mpi4py import MPI


class SimAtmosphere:
    def _exec(self, data, detectors=None, **kwargs):
        comm = data.comm.comm_group
        rank = data.comm.group_rank

        for iobs, ob in enumerate(data.obs):
            dets = ob.select_local_detectors(detectors, flagmask=self.det_mask)
            ob.detdata.ensure(self.det_data, detectors=dets)

            if len(dets) == 0:
                # Nothing to do for this observation
                continue

            # Compute the absorption and loading for this observation
            self._common_absorption_and_loading(
                ob, dets, self.absorption_key, self.loading_key, comm
            )

            self.observe_atm.apply(data.select(obs_index=iobs))

            if comm is not None:
                comm.Barrier()
            if rank == 0:
                print(f"{ob.name}: simulated and observed atmosphere")

    def _common_absorption_and_loading(self, obs, dets, absorption_key, loading_key, comm):
        if absorption_key is None and loading_key is None:
            return
        bandpass = obs.telescope.focalplane.bandpass

        generate_absorption = absorption_key is not None and (
            absorption_key not in obs or any(d not in obs[absorption_key] for d in dets)
        )
        generate_loading = loading_key is not None and (
            loading_key not in obs or any(d not in obs[loading_key] for d in dets)
        )
        if (not generate_loading) and (not generate_absorption):
            # Nothing to do for these detectors
            return

        freq_groups = dict()
        for det in dets:
            dfmin, dfmax = bandpass.get_range(det=det)
            freq_groups.setdefault(f"{dfmin} {dfmax}", list()).append(det)

        for fkey, fdets in freq_groups.items():
            freq_min, freq_max = bandpass.get_range(det=fdets[0])
            freqs = np.linspace(freq_min, freq_max, self.n_bandpass_freqs)
            ntask = 1 if comm is None else comm.size
            my_rank = 0 if comm is None else comm.rank
            n_freq_task = int(np.ceil(len(freqs) / ntask))
            my_freqs = freqs[my_rank * n_freq_task:(my_rank + 1) * n_freq_task]

            absorption = [self._absorption(f) for f in my_freqs] if generate_absorption else []
            loading = [self._loading(f) for f in my_freqs] if generate_loading else []
            if comm is not None:
                if generate_absorption:
                    absorption = np.hstack(comm.allgather(absorption))
                if generate_loading:
                    loading = np.hstack(comm.allgather(loading))
            if generate_absorption:
                obs.setdefault(absorption_key, dict())[fkey] = absorption
            if generate_loading:
                obs.setdefault(loading_key, dict())[fkey] = loading
