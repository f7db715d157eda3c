# Repository: desihub/desispec
# After the fix: merge d2da41721e6f66459d0732f19dcc08933de2ea84 (PR #1542)
# Files excerpted: py/desispec/scripts/proc.py (main, extraction step),
#                  py/desispec/scripts/extract.py (main_mpi), shortened
import os

from desispec.io import findfile, read_image
from desispec.psf import load_psf
import desispec.scripts.extract


# ---- py/desispec/scripts/extract.py ----
def main_mpi(args, comm=None, timing=None):
    rank = 0
    if comm is not None:
        rank = comm.rank

    img = None
    if rank == 0:
        img = read_image(args.input)
    if comm is not None:
        img = comm.bcast(img, root=0)

    # every rank of the extraction group opens the PSF file: raises if it is missing
    psf = load_psf(args.psf)

    specmin = args.specmin
    nspec = args.nspec if args.nspec is not None else psf.nspec
    # ... divide spectra among ranks, extract, write per-rank frames ...
    if comm is not None:
        comm.barrier()   # (real code: barrier before rank 0 merges the frames)
    return img, psf, specmin, nspec


# ---- py/desispec/scripts/proc.py ----
def main(args=None, comm=None):
    rank = comm.rank if comm is not None else 0
    size = comm.size if comm is not None else 1

    if rank > 0:
        cmds = inputs = outputs = None
    else:
        #- rank 0 collects commands to broadcast to others
        cmds = dict()
        inputs = dict()
        outputs = dict()
        for camera in args.cameras:
            cmd = 'desi_extract_spectra'
            preprocfile = findfile('preproc', args.night, args.expid, camera)
            psffile = findfile('psf', args.night, args.expid, camera)
            finalframefile = findfile('frame', args.night, args.expid, camera)
            if os.path.exists(finalframefile):
                continue
            framefile = finalframefile.replace(".fits", "-no-badcolumn-mask.fits")
            cmd += ' -i {}'.format(preprocfile)
            cmd += ' -p {}'.format(psffile)
            cmd += ' -o {}'.format(framefile)

            missing_inputs = False
            for infile in [preprocfile, psffile]:
                if not os.path.exists(infile):
                    missing_inputs = True

            if missing_inputs:
                # decided on rank 0 before the bcast: no group runs this camera
                continue

            if os.path.exists(framefile):
                continue

            cmds[camera] = cmd
            inputs[camera] = [preprocfile, psffile]
            outputs[camera] = [framefile, ]

    if comm is not None:
        cmds = comm.bcast(cmds, root=0)
        inputs = comm.bcast(inputs, root=0)
        outputs = comm.bcast(outputs, root=0)

        #- split communicator by 20 (number of bundles)
        extract_size = 20
        extract_group = rank // extract_size
        num_extract_groups = (size + extract_size - 1) // extract_size
        comm_extract = comm.Split(color=extract_group)

        for i in range(extract_group, len(args.cameras), num_extract_groups):
            camera = args.cameras[i]
            if camera in cmds:
                cmdargs = cmds[camera].split()[1:]
                extract_args = desispec.scripts.extract.parse(cmdargs)
                if comm_extract.rank == 0:
                    print('RUNNING: {}'.format(cmds[camera]))

                desispec.scripts.extract.main_mpi(extract_args, comm=comm_extract)
                if comm_extract.rank == 0:
                    for outfile in outputs[camera]:
                        if not os.path.exists(outfile):
                            print('Camera {} extraction missing output {}'.format(camera, outfile))

        comm.barrier()

    if comm is not None:
        comm.barrier()
