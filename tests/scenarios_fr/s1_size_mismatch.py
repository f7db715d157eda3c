"""Scenario 1: every rank calls the same all_reduce line, rank 0's tensor has twice the elements."""
import torch
import torch.distributed as dist

from _common import init, linger, say, warmup


def sync(step, rank):
    n = 2048 if (rank == 0 and step == 3) else 1024
    t = torch.ones(n)
    dist.all_reduce(t)  # SYNC_LINE
    return t


def main():
    rank, world = init()
    warmup()
    for step in range(1, 6):
        say("step", step)
        try:
            sync(step, rank)
        except RuntimeError as e:  # gloo raises on a size mismatch
            linger(e)
    say("done")


main()
