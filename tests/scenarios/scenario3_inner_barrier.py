"""Scenario 3 (HANG_SCENARIOS.md): a second barrier inside a rank-0-only block after evaluation.

Every rank calls ``barrier()`` after the epoch; then ``if rank == 0: barrier();
evaluate()``. Rank 0 waits in the inner barrier, ranks 1-3 wait in the next
epoch's all_reduce. Expected roll call: SPLIT naming both lines (suspect: rank 0).

Plain user script: hpc-hangkit arms it from the environment (sitecustomize).
Run with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set (env:// rendezvous).
"""
import datetime
import sys

import torch
import torch.distributed as dist


def evaluate(model):
    return float(model.sum())


def train_epoch(model, epoch):
    grad = torch.ones(16) * (epoch + 1)
    dist.all_reduce(grad)  # MARK: train-allreduce
    model += grad


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=900))
    rank = dist.get_rank()
    model = torch.zeros(16)
    for epoch in range(4):
        train_epoch(model, epoch)
        dist.barrier()
        if rank == 0 and epoch == 1:
            dist.barrier()  # MARK: inner-barrier
            evaluate(model)
        print("[rank %d] epoch %d done" % (rank, epoch), flush=True)
    print("[rank %d] finished" % rank, flush=True)


if __name__ == "__main__":
    sys.exit(main())
