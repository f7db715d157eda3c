# Repository: desihub/desispec
# After the fix: merge 92cba728639dd056714d678d2d237d5f2319180e (PR #1033, commit ffcec8299)
# Files excerpted: bin/desi_proc (ARC PSF-fit step), py/desispec/scripts/specex.py (main), shortened
import ctypes as ct

from mpi4py import MPI

import desispec.scripts.specex
from desispec.io import findfile


# ---- py/desispec/scripts/specex.py ----
def main(args, comm=None):
    rank = 0
    if comm is not None:
        rank = comm.rank
    libspecex = ct.CDLL("libspecex.so")
    outroot = args.output.replace(".fits", "")

    failcount = 0
    for b in args.my_bundles:
        com = ['desi_psf_fit', '-a', args.input, '--in-psf', args.inpsf,
               '--out-psf', "{}_{:02d}.fits".format(outroot, b)]
        retval = libspecex.cspecex_desi_psf_fit(len(com), com)
        if retval != 0:
            failcount += 1

    if comm is not None:
        failcount = comm.allreduce(failcount, op=MPI.SUM)

    if failcount > 0:
        # all processes throw
        raise RuntimeError("some bundles failed desi_psf_fit")

    if rank == 0:
        desispec.scripts.specex.merge_psf(args.bundle_files, args.output)

    if comm is not None:
        failcount = comm.bcast(failcount, root=0)

    if failcount > 0:
        # all processes throw
        raise RuntimeError("merging of per-bundle files failed")
    return


# ---- bin/desi_proc (ARC / TESTARC branch) ----
def fit_psfs(args, comm, rank, size):
    if rank > 0:
        cmds = None
    else:
        cmds = dict()
        for camera in args.cameras:
            preprocfile = findfile('preproc', args.night, args.expid, camera)
            tmpname = findfile('psf', args.night, args.expid, camera)
            inpsf = tmpname.replace("psf", "shifted-input-psf")
            outpsf = tmpname.replace("psf", "fit-psf")
            cmd = 'desi_compute_psf'
            cmd += ' --input-image {}'.format(preprocfile)
            cmd += ' --input-psf {}'.format(inpsf)
            cmd += ' --output-psf {}'.format(outpsf)
            cmds[camera] = cmd

    if comm is not None:
        cmds = comm.bcast(cmds, root=0)
        #- split communicator by 20 (number of bundles)
        group_size = 20
        group = rank // group_size
        num_groups = (size + group_size - 1) // group_size
        comm_group = comm.Split(color=group)

        for i in range(group, len(args.cameras), num_groups):
            camera = args.cameras[i]
            if camera in cmds:
                cmdargs = cmds[camera].split()[1:]
                cmdargs = desispec.scripts.specex.parse(cmdargs)
                if comm_group.rank == 0:
                    print('RUNNING: {}'.format(cmds[camera]))

                try:
                    desispec.scripts.specex.main(cmdargs, comm=comm_group)
                except Exception as e:
                    if comm_group.rank == 0:
                        print('FAILED: MPI group {} camera {}'.format(group, camera))
                        print('FAILED: {}'.format(cmds[camera]))
                        print(e)

        comm.barrier()
