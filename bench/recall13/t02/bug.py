# Excerpt (rewritten) of redrock py/redrock/utils.py, py/redrock/templates.py and
# py/redrock/external/desi.py at desihub/redrock dbc9bd37 (parent of fix cb2257a, PR #211).
import sys
import time

import numpy as np


# ---- py/redrock/utils.py -------------------------------------------------
def elapsed(timer, prefix, comm=None):
    """Get and print the elapsed time."""
    if comm is not None:
        comm.barrier()

    cur = time.time()
    if timer is not None:
        elapsed = cur - timer
        if ((comm is None) or (comm.rank == 0)):
            print("{}: {:0.1f} seconds".format(prefix, elapsed))
            sys.stdout.flush()

    return cur


# ---- py/redrock/templates.py ---------------------------------------------
def load_dist_templates(dwave, templates=None, comm=None, mp_procs=1,
                        redistribute=False, use_gpu=False, gpu_mode=False):
    """Read and distribute templates from disk."""
    timer = elapsed(None, "", comm=comm)

    template_files = None
    if (comm is None) or (comm.rank == 0):
        template_files = find_templates(template_dir=templates)

    if comm is not None:
        template_files = comm.bcast(template_files, root=0)

    template_data = list()
    if (comm is None) or (comm.rank == 0):
        for t in template_files:
            template_data.append(Template(filename=t))

    if comm is not None:
        template_data = comm.bcast(template_data, root=0)

    timer = elapsed(timer, "Read and broadcast of {} templates"
                    .format(len(template_files)), comm=comm)

    if (use_gpu):
        import cupy as cp
        c = cp.ones(1)
        timer = elapsed(timer, "Creating GPU context", comm=comm)

    dtemplates = list()
    for t in template_data:
        dtemplate = DistTemplate(t, dwave, mp_procs=mp_procs, comm=comm,
                                 use_gpu=use_gpu, gpu_mode=gpu_mode)
        dtemplates.append(dtemplate)

    timer = elapsed(timer, "Rebinning templates", comm=comm)

    return dtemplates


# ---- py/redrock/external/desi.py -----------------------------------------
def rrdesi(options=None, comm=None):
    """Estimate redshifts for DESI targets."""
    args = parse_args(options)

    comm_size = 1
    comm_rank = 0
    if comm is not None:
        comm_size = comm.size
        comm_rank = comm.rank

    # GPU configuration
    if args.gpu:
        # Determine which processes will use a GPU
        max_gpuprocs = comm_size
        if args.max_gpuprocs is not None:
            max_gpuprocs = args.max_gpuprocs
        use_gpu = comm_rank < max_gpuprocs

        if comm is not None:
            gpu_proc_flags = comm.allgather(use_gpu)
        else:
            gpu_proc_flags = [use_gpu, ]
        redistribute_templates = True
    else:
        use_gpu = False
        redistribute_templates = False

    start = elapsed(None, "", comm=comm)
    targets = DistTargetsDESI(args.infiles, comm=comm)
    dwave = targets.wavegrids()
    stop = elapsed(start, "Read and distribution of targets", comm=comm)

    # Pass both use_gpu (this proc) and args.gpu (if any proc is using GPU)
    dtemplates = load_dist_templates(dwave, templates=args.templates,
                                     comm=comm, mp_procs=args.mp,
                                     redistribute=redistribute_templates,
                                     use_gpu=use_gpu, gpu_mode=args.gpu)
    return dtemplates


# ---- bin/rrdesi_mpi -------------------------------------------------------
if __name__ == "__main__":
    import mpi4py.MPI as MPI
    rrdesi(comm=MPI.COMM_WORLD)
