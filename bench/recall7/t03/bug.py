# OpenMDAO/OpenMDAO @ c681b35fde6f1590f876a385cc25dfceb809c913 (master before merge of PR #2457)
# Files excerpted and merged (trimmed):
#   ---- openmdao/visualization/scaling_viewer/scaling_report.py ---- (view_driver_scaling)
#   ---- openmdao/core/driver.py ---- (Driver.get_design_var_values / Driver._get_voi_val)
# Stubs: MPI import, np.
import numpy as np

try:
    from mpi4py import MPI
except ImportError:
    MPI = None


# ---- openmdao/core/driver.py ----
class Driver:

    def _get_voi_val(self, name, meta, remote_vois, driver_scaling=True,
                     get_remote=True, rank=None):
        model = self._problem().model
        comm = model.comm
        get = model._outputs._abs_get_val
        indices = meta['indices']
        src_name = name

        if src_name in remote_vois:
            owner, size = remote_vois[src_name]
            if owner == comm.rank:
                val = get(name, flat=True).copy()
            else:
                val = np.empty(size)

            if get_remote:
                comm.Bcast(val, root=owner)
        else:
            val = get(name, flat=True)
        return val

    def get_design_var_values(self, get_remote=True, driver_scaling=True):
        """
        get_remote : If True, retrieve the value even if it is on a remote process.  Note that if
            the variable is remote on ANY process, this function must be called on EVERY process
            in the Problem's MPI communicator.
        """
        return {n: self._get_voi_val(n, dv, self._remote_dvs, get_remote=get_remote,
                                     driver_scaling=driver_scaling)
                for n, dv in self._designvars.items()}


# ---- openmdao/visualization/scaling_viewer/scaling_report.py ----
def view_driver_scaling(driver, outfile='driver_scaling_report.html', show_browser=True,
                        title=None, jac=True):
    """
    Generate a self-contained html file containing a table of scaling data.
    """
    if MPI and MPI.COMM_WORLD.rank != 0:
        return

    dv_table = []
    con_table = []
    obj_table = []

    dv_vals = driver.get_design_var_values(get_remote=True)
    obj_vals = driver.get_objective_values(driver_scaling=True)
    con_vals = driver.get_constraint_values(driver_scaling=True)

    data = {'dv_table': dv_table, 'con_table': con_table, 'obj_table': obj_table}

    if jac:
        data['oflabels'] = driver._get_ordered_nl_responses()
        data['wrtlabels'] = list(dv_vals)
        totals = driver._compute_totals(of=data['oflabels'], wrt=data['wrtlabels'],
                                        return_format='array')

    if driver._problem().comm.rank == 0:
        viewer = 'scaling_table.html'
        ...  # (trimmed: writes the html file on rank 0 only)

    return data
