"""A healthy 4-rank job that never calls checkpoint(): it must never be confirmed.

Runs ``--seconds`` of steps (compute + all_reduce) and exits 0. Works under
torchrun (gloo, the default) or ``mpiexec`` with ``--mpi``:

    hpc-hangkit run -- python -m torch.distributed.run --nproc-per-node 4 examples/healthy.py
    hpc-hangkit run -- mpiexec -n 4 python examples/healthy.py --mpi

With no heartbeats the watchdog dumps every period; the detector sees the
ranks' stacks change between dumps, so the job counts as progressing.
"""
import argparse
import math
import time


def make_comm(use_mpi):
    """Return (rank, world, allreduce(float) -> float, barrier(), finish())."""
    if use_mpi:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        return (comm.Get_rank(), comm.Get_size(),
                lambda x: comm.allreduce(x, op=MPI.SUM), comm.Barrier, lambda: None)
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://")

    def allreduce(x):
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0])
    return dist.get_rank(), dist.get_world_size(), allreduce, dist.barrier, dist.destroy_process_group


def compute(step, rank):
    acc = 0.0
    for i in range(30000 + 5000 * ((step + rank) % 4)):
        acc += math.sin(i * 0.001 + step) ** 2
    return acc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", action="store_true", help="use mpi4py instead of torch gloo")
    ap.add_argument("--seconds", type=float, default=12.0)
    args = ap.parse_args()
    rank, world, allreduce, barrier, finish = make_comm(args.mpi)
    t_end = time.time() + args.seconds
    step = 0
    total = 0.0
    while True:
        total = allreduce(compute(step, rank))
        # every rank leaves at the same step (rank 0 decides)
        stop = allreduce(1.0 if (rank == 0 and time.time() >= t_end) else 0.0)
        step += 1
        if stop > 0:
            break
    barrier()
    print("rank %d of %d done after %d steps (%.3g)" % (rank, world, step, total), flush=True)
    finish()


if __name__ == "__main__":
    main()
