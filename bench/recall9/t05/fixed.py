# Repository: https://github.com/ECP-WarpX/WarpX (now BLAST-WarpX/warpx)
# Commit (fix): 6cf7d7bb5c00700bda7fb1257cf1a466ef176d69 (PR #2808); before: 0f969159f21098db1843df0f797db874225ecd4c
# Files excerpted: Python/pywarpx/_libwarpx.py (module header, LibWarpX.add_particles),
#                  Examples/Tests/ParticleDataPython/PICMI_inputs_2d.py (per-rank injection callback)
import ctypes

import numpy as np

try:
    # --- If mpi4py is going to be used, this needs to be imported
    # --- before libwarpx is loaded, because mpi4py calls MPI_Init
    from mpi4py import MPI

    # --- Change MPI Comm type depending on MPICH (int) or OpenMPI (void*)
    if MPI._sizeof(MPI.Comm) == ctypes.sizeof(ctypes.c_int):
        _MPI_Comm_type = ctypes.c_int
    else:
        _MPI_Comm_type = ctypes.c_void_p
except ImportError:
    MPI = None
    _MPI_Comm_type = ctypes.c_void_p


# ---- Python/pywarpx/_libwarpx.py ----
class LibWarpX():

    def add_particles(self, species_name, x=None, y=None, z=None, ux=None, uy=None, uz=None, w=None,
                    unique_particles=True, **kwargs):
        '''

        A function for adding particles to the WarpX simulation.

        '''

        # --- Get length of arrays, set to one for scalars
        lenx = np.size(x)
        leny = np.size(y)
        lenz = np.size(z)
        lenux = np.size(ux)
        lenuy = np.size(uy)
        lenuz = np.size(uz)
        lenw = np.size(w)

        # --- Find the max length of the parameters supplied
        maxlen = 0
        if x is not None:
            maxlen = max(maxlen, lenx)
        if y is not None:
            maxlen = max(maxlen, leny)
        if z is not None:
            maxlen = max(maxlen, lenz)
        if ux is not None:
            maxlen = max(maxlen, lenux)
        if uy is not None:
            maxlen = max(maxlen, lenuy)
        if uz is not None:
            maxlen = max(maxlen, lenuz)
        if w is not None:
            maxlen = max(maxlen, lenw)

        # --- Make sure that the lengths of the input parameters are consistent
        assert x is None or lenx==maxlen or lenx==1, "Length of x doesn't match len of others"
        ...
        for key, val in kwargs.items():
            assert np.size(val)==1 or len(val)==maxlen, f"Length of {key} doesn't match len of others"

        # --- Broadcast scalars into appropriate length arrays
        # --- If the parameter was not supplied, use the default value
        if lenx == 1:
            x = np.full(maxlen, (x or 0.), float)
        ...
        for key, val in kwargs.items():
            if np.size(val) == 1:
                kwargs[key] = np.full(maxlen, val, float)

        # --- The -3 is because the comps include the velocites
        nattr = self.get_nattr_species(species_name) - 3
        attr = np.zeros((maxlen, nattr))
        attr[:,0] = w

        for key, vals in kwargs.items():
            # --- The -3 is because components 1 to 3 are velocities
            attr[:,self.get_particle_comp_index(species_name, key)-3] = vals

        self.libwarpx_so.warpx_addNParticles(
            ctypes.c_char_p(species_name.encode('utf-8')), x.size,
            x, y, z, ux, uy, uz, nattr, attr, unique_particles
        )


# ---- Examples/Tests/ParticleDataPython/PICMI_inputs_2d.py ----
from pywarpx import callbacks, picmi

sim = picmi.Simulation(...)
sim.initialize_inputs()
sim.initialize_warpx()

my_id = sim.extension.getMyProc()

def add_particles():

    nps = 10 * (my_id + 1)
    x = np.linspace(0.005, 0.025, nps)
    y = np.zeros(nps)
    z = np.linspace(0.005, 0.025, nps)
    ux = np.random.normal(loc=0, scale=1e3, size=nps)
    uy = np.random.normal(loc=0, scale=1e3, size=nps)
    uz = np.random.normal(loc=0, scale=1e3, size=nps)
    w = np.ones(nps) * 2.0
    newPid = 5.0

    sim.extension.add_particles(
        species_name='electrons', x=x, y=y, z=z, ux=ux, uy=uy, uz=uz,
        w=w, newPid=newPid, unique_particles=args.unique
    )

callbacks.installbeforestep(add_particles)

sim.step(max_steps - 1)
