# alan-turing-institute/stat-fem @ 784c36f52108d5c84fbbed3808491eaac6aba94d (commit before the fix 6cea2e6)
# Excerpt: stat_fem/{solving_utils.py, InterpolationMatrix.py, solving.py}
import numpy as np
from firedrake import COMM_WORLD, COMM_SELF
from firedrake.constant import Constant
from firedrake.function import Function
from firedrake.petsc import PETSc
from firedrake.solving import solve


# ---- stat_fem/solving_utils.py ----
def _solve_forcing_covariance(G, A, rhs):
    "solve the forcing covariance part of the stat FEM"

    # to investigate: I couldn't get this to work when only one ensemble
    # process calls it, so we do some unnecessary solves with all zeros
    # explore how this can be fixed

    ksp = PETSc.KSP().create()
    ksp.setOperators(A.petscmat)
    ksp.setFromOptions()

    rhs_working = rhs.copy()
    x = Function(G.function_space).vector()
    with rhs_working.dat.vec_ro as rhs_temp:
        with x.dat.vec as x_temp:
            ksp.solve(rhs_temp, x_temp)
    G.mult(x, rhs_working)
    with rhs_working.dat.vec_ro as rhs_temp:
        with x.dat.vec as x_temp:
            ksp.solve(rhs_temp, x_temp)

    return x.copy()


# ---- stat_fem/InterpolationMatrix.py ----
class InterpolationMatrix(object):
    "class representing an interpolation matrix"

    def interp_covariance_to_data(self, G, A, ensemble_comm=COMM_SELF):
        "interpolate a FEM prior covariance matrix to the data space"

        if not self.is_assembled:
            self.assemble()

        # use ensemble comm to split up solves across ensemble processes

        v_tmp = PETSc.Vec().create(comm=ensemble_comm)
        v_tmp.setSizes((-1, self.n_data))
        v_tmp.setFromOptions()

        imin, imax = v_tmp.getOwnershipRange()

        v_tmp.destroy()

        if self.comm.rank == 0:
            n_local = self.n_data
        else:
            n_local = 0

        result_tmparray = np.zeros((imax - imin, n_local))

        for i in range(imin, imax):
            rhs = self.get_meshspace_column_vector(i)
            tmp = _solve_forcing_covariance(G, A, rhs)
            result_tmparray[i - imin] = self.interp_mesh_to_data(tmp)

        # create distributed vector for gathering results at root

        cov_distrib = PETSc.Vec().create(comm=ensemble_comm)
        cov_distrib.setSizes((n_local*(imax - imin), -1))
        cov_distrib.setFromOptions()
        cov_distrib.array = result_tmparray.flatten()

        scatterfunc, cov_gathered = PETSc.Scatter.toZero(cov_distrib)
        scatterfunc.scatter(cov_distrib, cov_gathered,
                            mode=PETSc.ScatterMode.SCATTER_FORWARD)

        out_array = np.copy(cov_gathered.array)
        cov_distrib.destroy()
        cov_gathered.destroy()

        if self.comm.rank == 0 and ensemble_comm.rank == 0:
            outsize = (self.n_data, self.n_data)
        else:
            outsize = (0,0)

        return np.reshape(out_array, outsize)


# ---- stat_fem/solving.py ----
def solve_prior_covariance(A, b, G, data, params, ensemble_comm=COMM_SELF):
    """
    solve base (prior) fem plus covariance interpolated to the data locations
    """

    # create interpolation matrix

    im = InterpolationMatrix(G.function_space, data.get_coords())

    # form interpolated prior covariance across all ensemble processes

    Cu = im.interp_covariance_to_data(G, A, ensemble_comm)

    # solve base FEM (prior mean) and interpolate to data space

    x = Function(G.function_space)

    if ensemble_comm.rank == 0:
        solve(A, x, b)
    else:
        x.assign(Constant(0.))

    mu = im.interp_mesh_to_data(x.vector())

    if not (ensemble_comm.rank == 0 and G.comm.rank == 0):
        mu = np.zeros(0)

    im.destroy()

    return mu, Cu
