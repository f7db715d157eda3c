"""Scenario 4 (HANG_SCENARIOS.md): uneven data.

Rank 0 has 5 batches, the other ranks 6. Rank 0 leaves the loop first; then
``final=barrier``: it waits in a final barrier (expected roll call: SPLIT, rank 0
at the barrier line, ranks 1-3 at the 6th step's all_reduce), or ``final=exit``:
it exits (expected: GONE naming rank 0, ranks 1-3 at the all_reduce line).

Usage: python scenario4_uneven_data.py barrier|exit   (RANK/WORLD_SIZE/MASTER_* set)
"""
import datetime
import sys
import time

import torch
import torch.distributed as dist


def batches_for(rank):
    return 5 if rank == 0 else 6


def step(batch):
    grad = torch.full((32,), float(batch))
    dist.all_reduce(grad)  # MARK: step-allreduce
    return grad


def main(final):
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=900))
    rank = dist.get_rank()
    for batch in range(batches_for(rank)):
        step(batch)
        print("[rank %d] batch %d done" % (rank, batch), flush=True)
        time.sleep(0.2)
    print("[rank %d] out of data" % rank, flush=True)
    if final == "barrier":
        dist.barrier()  # MARK: final-barrier
    print("[rank %d] exiting" % rank, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "barrier"))
