# Excerpt (rewritten) of draco/util/random.py and draco/analysis/delay.py
# after radiocosmology/draco a65722f ("avoid hanging mpi broadcast calls in RandomTask").
import zlib

import numpy as np
from caput import config

from draco.core import task


class MultithreadedRNG:
    def __init__(self, seed, threads=None):
        self._seed, self._threads = seed, threads


class RandomTask(task.MPILoggedTask):
    """A base class for MPI tasks that need to generate random numbers."""

    seed = config.Property(proptype=int, default=None)
    threads = config.Property(proptype=int, default=None)

    def __init__(self) -> None:
        """Generate and set a new random seed for this task.

        __init__ is run on every rank, so the broadcast is always matched.
        """
        super().__init__()

        seed = self.seed

        if seed is None:
            # Generate a random seed on rank 0 and broadcast it to all ranks
            seed = np.random.SeedSequence().entropy
            seed = self.comm.bcast(seed, root=0)

        self.log.info(f"Using random seed: {seed}")
        cls_name = f"{self.__module__}.{self.__class__.__name__}"
        cls_seed = zlib.adler32(cls_name.encode())

        self._local_seed = seed + (self.comm.rank + 1) * cls_seed

    _rng = None

    @property
    def rng(self) -> np.random.Generator:
        """A random number generator for this task."""
        if self._rng is None:
            self._rng = MultithreadedRNG(self.local_seed, threads=self.threads)

        return self._rng

    @property
    def local_seed(self) -> int:
        """Get the seed to be used on this rank."""
        return self._local_seed


def delay_power_spectrum_gibbs(data, N, Ni, initial_S, window=None, fsel=None,
                               niter=20, rng=None, complex_timedomain=False):
    """Gibbs sampler for the delay power spectrum (body elided)."""
    raise NotImplementedError


class DelayPowerSpectrumBase(task.SingleTask):
    """Base class for delay power spectrum estimation (non-functional)."""

    save_spectrum_mask = config.Property(proptype=bool, default=False)

    def _evaluate(self, data_view, weight_view, out_cont, delays, channel_ind):
        nbase = out_cont.spectrum.global_shape[0]
        ndelay = len(delays)

        prior = self._get_prior(nbase, ndelay, delays.dtype)

        # Iterate over all (local) baselines and estimate the spectrum
        for lbi, bi in out_cont.spectrum[:].enumerate(axis=0):
            data = data_view.local_array[lbi]
            weight = weight_view.local_array[lbi]

            # Apply the cuts to the data
            t = self._cut_data(data, weight)
            if t is None:
                # Record this sample as bad
                if self.save_spectrum_mask:
                    out_cont.datasets["spectrum_mask"][bi] = 1
                continue

            data, weight, nzf, _ = t

            spec, samples, success = self._estimator(
                data, weight, prior[lbi], ndelay, channel_ind[nzf]
            )

            out_cont.spectrum[bi] = spec

        if self.save_spectrum_mask:
            n_conv = nbase - out_cont.datasets["spectrum_mask"][:].sum().allreduce()
            self.log.debug(f"{n_conv}/{nbase} unflagged baselines.")

        return out_cont


class DelayPowerSpectrumGibbs(DelayPowerSpectrumBase, RandomTask):
    """Use a Gibbs sampler to estimate the delay power spectrum."""

    nsamp = config.Property(proptype=int, default=20)

    def _estimator(self, data, weight, S, ndelay, channel_ind):
        samples = delay_power_spectrum_gibbs(
            data,
            ndelay,
            weight,
            S,
            fsel=channel_ind,
            niter=self.nsamp,
            rng=self.rng,
        )

        spec = np.fft.fftshift(np.median(samples[-(self.nsamp // 2):], axis=0))

        return spec, samples, True
