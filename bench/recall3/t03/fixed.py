import pathlib

import numpy as np

try:
    from mpi4py import MPI
except ImportError:
    MPI = None


class Driver(object):
    def _get_voi_val(self, name, meta, remote_vois, driver_scaling=True, get_remote=True):
        model = self._problem().model
        comm = model.comm
        get = model._outputs._abs_get_val
        src_name = meta['source']

        if name in remote_vois:
            owner, size = remote_vois[name]
            if owner == comm.rank:
                val = get(src_name, flat=True).copy()
            else:
                val = np.empty(size)
            if get_remote:
                comm.Bcast(val, root=owner)
        else:
            val = get(src_name, flat=True).copy()
        return val

    def get_objective_values(self, driver_scaling=True):
        return {n: self._get_voi_val(n, obj, self._remote_objs, driver_scaling=driver_scaling)
                for n, obj in self._objs.items()}

    def get_design_var_values(self, driver_scaling=True):
        return {n: self._get_voi_val(n, dv, self._remote_dvs, driver_scaling=driver_scaling)
                for n, dv in self._designvars.items()}


def opt_report(prob, outfile=None):
    driver = prob.driver
    if not driver.supports['optimization']:
        return

    # only create report on rank 0
    create = MPI is None or MPI.COMM_WORLD.rank == 0

    if not outfile:
        outfile = 'opt_report.html'
    outfilepath = pathlib.Path(prob.get_reports_dir(force=True)).joinpath(outfile)

    objs_vals = {}
    desvars_vals = {}
    with prob.model._scaled_context_all():
        for abs_name, meta in driver._objs.items():
            objs_vals[abs_name] = driver.get_objective_values(driver_scaling=True)[abs_name]
        for abs_name, meta in driver._designvars.items():
            desvars_vals[abs_name] = driver.get_design_var_values(driver_scaling=True)[abs_name]

    if create:
        with open(outfilepath, 'w') as f:
            f.write(f"<html><body>{objs_vals}{desvars_vals}</body></html>")
