"""A 4-rank mpi4py job where rank 1 skips ``comm.allreduce`` and hangs the others.

A plain user script: nothing hpc-hangkit-specific is imported.

    hpc-hangkit run --confirm-duration 6 --poll-interval 1 -- \
        mpiexec -n 4 python examples/mpi_divergent.py

At step 3 rank 1 skips the ``comm.allreduce`` in ``global_norm()`` and goes on
to the final ``comm.Barrier()``; ranks 0, 2, 3 wait in the allreduce for ever
(MPI has no timeout). The roll call must name rank 1.
"""
import argparse
import math
import time

from mpi4py import MPI


def global_norm(comm, local):
    total = comm.allreduce(local, op=MPI.SUM)  # ranks 0,2,3 wait here for ever at step 3
    return math.sqrt(total)


def compute(step, rank):
    return sum(math.sin(i * (step + 1) + rank) ** 2 for i in range(20000))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--skip-step", type=int, default=3)
    ap.add_argument("--skip-rank", type=int, default=1)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    for step in range(args.steps):
        local = compute(step, rank)
        if rank == args.skip_rank and step == args.skip_step:
            pass  # a rank-local branch skips the reduction
        else:
            global_norm(comm, local)
        time.sleep(0.05)
    comm.Barrier()  # rank 1 waits here, alone
    print("rank %d done" % rank, flush=True)


if __name__ == "__main__":
    main()
