"""A 4-rank PyTorch (gloo, CPU) job where rank 1 skips an all_reduce and hangs the others.

A plain user script: nothing hpc-hangkit-specific is imported. Launch it with
torchrun (or any launcher that sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT):

    hpc-hangkit run --confirm-duration 6 --poll-interval 1 -- \
        python -m torch.distributed.run --nproc-per-node 4 examples/gloo_divergent.py

What happens: every rank trains for a few steps, calling ``sync_grads()``
(an ``all_reduce``) each step. At step 3, rank 1 takes a rank-local branch that
skips ``sync_grads()`` and goes on to the end-of-epoch ``barrier()``. Ranks 0, 2
and 3 wait in the ``all_reduce`` for ever (gloo does not notice the mismatch
before its 30-minute process-group timeout). The roll call must say: ranks
0,2-3 waiting at the all_reduce line in sync_grads, rank 1 elsewhere.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def sync_grads(grads):
    dist.all_reduce(grads)  # ranks 0,2,3 wait here for ever at step 3
    grads /= dist.get_world_size()
    return grads


def compute(step, rank):
    torch.manual_seed(step * 100 + rank)
    a = torch.randn(200, 200)
    for _ in range(5):
        a = torch.tanh(a @ a.T / 200.0)
    return a.sum(dim=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--skip-step", type=int, default=3)
    ap.add_argument("--skip-rank", type=int, default=1)
    args = ap.parse_args()
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    for step in range(args.steps):
        grads = compute(step, rank)
        if rank == args.skip_rank and step == args.skip_step:
            # a rank-local branch (think: "skip the sync on an empty batch")
            pass
        else:
            sync_grads(grads)
        time.sleep(0.05)
    dist.barrier()  # rank 1 waits here, alone
    print("rank %d done" % rank, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
