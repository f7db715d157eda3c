# Repository: NCAR/WrfHydroForcing
# Fix commit: d104fe7c9999d2330804f2dce2bc9896fa800949 (PR #75), after-fix shape
# Files excerpted: core/time_handling.py (find_conus_rap_neighbors), core/regrid.py (regrid_conus_rap),
#                  core/err_handler.py (check_program_status), core/parallel.py (MpiConfig),
#                  core/forecastMod.py (per-forcing loop), shortened
import os
import sys

import numpy as np
from mpi4py import MPI


class MpiConfig:
    def __init__(self):
        self.comm = MPI.COMM_WORLD
        self.comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def scatter_array(self, geo_meta, src_array, config_options):
        shape = np.empty(2, dtype=np.int64)
        if self.rank == 0:
            shape[:] = src_array.shape
        self.comm.Bcast(shape, root=0)
        recvbuf = np.empty(geo_meta.local_shape, dtype=np.float32)
        sendbuf = [src_array, geo_meta.counts, geo_meta.offsets, MPI.FLOAT] if self.rank == 0 else None
        self.comm.Scatterv(sendbuf, recvbuf, root=0)
        return recvbuf


def check_program_status(config_options, mpi_config):
    # Reduce version: collect the error flags on rank 0
    any_error = mpi_config.comm.reduce(config_options.errFlag)
    if mpi_config.rank == 0 and any_error:
        mpi_config.comm.Abort()
        sys.exit(1)


def find_conus_rap_neighbors(input_forcings, config_options, d_current, mpi_config):
    # (RAP cycle / forecast-hour arithmetic omitted)
    tmp_file2 = input_forcings.inDir + '/rap.' + input_forcings.cycle_day + '/rap.t' + \
        input_forcings.cycle_hour + 'z.awp130bgrbf' + str(input_forcings.fcst_hour2).zfill(2) + \
        input_forcings.file_ext
    if input_forcings.file_in2 != tmp_file2:
        input_forcings.file_in2 = tmp_file2
        input_forcings.regridComplete = False
    check_program_status(config_options, mpi_config)

    # Ensure we have the necessary new file (every rank switches to the `pgrb` name,
    # only the messages stay on rank 0)
    if not os.path.isfile(input_forcings.file_in2):
        # look for the `pgrb` equivalent:
        input_forcings.file_in2 = input_forcings.file_in2.replace("bgrb", "pgrb")
        if mpi_config.rank == 0:
            if not os.path.isfile(input_forcings.file_in2):
                config_options.statusMsg = "Expected input RAP file not found, will not be used."
            else:
                config_options.statusMsg = "bgrb file missing; " + input_forcings.file_in2 + " used instead"

    # If the file is missing, set the local slab of arrays to missing.
    if not os.path.isfile(input_forcings.file_in2):
        if input_forcings.regridded_forcings2 is not None:
            input_forcings.regridded_forcings2[:, :, :] = config_options.globalNdv

    check_program_status(config_options, mpi_config)


def regrid_conus_rap(input_forcings, config_options, geo_meta, mpi_config):
    # If the expected file is missing, this means we are allowing missing files, simply
    # exit out of this routine as the regridded fields have already been set to NDV.
    if not os.path.isfile(input_forcings.file_in2):
        return
    if input_forcings.regridComplete:
        return

    input_forcings.tmpFile = config_options.scratch_dir + "/RAP_CONUS_TMP.nc"
    check_program_status(config_options, mpi_config)

    id_tmp = None
    if mpi_config.rank == 0:
        os.system('$WGRIB2 ' + input_forcings.file_in2 + ' -netcdf ' + input_forcings.tmpFile)
        id_tmp = input_forcings.open_netcdf(input_forcings.tmpFile)
    check_program_status(config_options, mpi_config)

    for force_count, grib_var in enumerate(input_forcings.grib_vars):
        var_tmp = None
        if mpi_config.rank == 0:
            var_tmp = id_tmp.variables[input_forcings.netcdf_var_names[force_count]][0, :, :]
        check_program_status(config_options, mpi_config)

        var_sub_tmp = mpi_config.scatter_array(geo_meta, var_tmp, config_options)
        check_program_status(config_options, mpi_config)

        input_forcings.esmf_field_in.data[:, :] = var_sub_tmp
        input_forcings.esmf_field_out = input_forcings.regridObj(input_forcings.esmf_field_in,
                                                                 input_forcings.esmf_field_out)
        input_forcings.regridded_forcings2[force_count, :, :] = input_forcings.esmf_field_out.data
        check_program_status(config_options, mpi_config)
    input_forcings.regridComplete = True


def process_forecast_step(input_forcing_mods, config_options, geo_meta, out_date, mpi_config):
    for force_key in config_options.input_forcings:
        input_forcings = input_forcing_mods[force_key]
        find_conus_rap_neighbors(input_forcings, config_options, out_date, mpi_config)
        check_program_status(config_options, mpi_config)
        regrid_conus_rap(input_forcings, config_options, geo_meta, mpi_config)
        check_program_status(config_options, mpi_config)
