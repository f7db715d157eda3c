"""A rank returns early from a helper that the other ranks are still inside.

Shape of pytorch/pytorch#138322 (https://github.com/pytorch/pytorch/issues/138322: a rank
skips the barrier the others wait at, behind ``if rank != 3``), here one call deeper: rank 2
leaves ``sync_stats`` before its all_reduce at step 3, goes on, and waits at the next step's
all_reduce in ``train`` while ranks 0,1,3 wait in ``sync_stats``. The statistics go over their
own process group (as a CPU metrics group would), so the two collectives never pair up: a clean
hang. ``hpc-hangkit lint`` reports the early return (HK102).
"""
import time

import torch
import torch.distributed as dist

from _job import init, say


def sync_stats(stats, stats_pg, rank, step):
    if rank == 2 and step == 3:  # BRANCH_LINE
        return stats
    dist.all_reduce(stats, group=stats_pg)  # HELPER_LINE
    return stats


def train(rank, stats_pg):
    for step in range(1, 8):
        stats = torch.ones(8)
        sync_stats(stats, stats_pg, rank, step)
        grad = torch.ones(16)
        dist.all_reduce(grad)  # TRAIN_LINE
        say("step", step)
        time.sleep(0.05)


def main():
    rank, _ = init()
    train(rank, dist.new_group())
    say("done")


if __name__ == "__main__":
    main()
