"""Scenario 5: two groups of 2 via new_group; in group {2,3} rank 2 calls all_gather while rank 3 calls
all_reduce; group {0,1} then waits in the next world collective."""
import torch
import torch.distributed as dist

from _common import init, say, warmup, world_step


def tp_step(rank, group, step):
    t = torch.ones(256)
    if rank == 2 and step == 3:
        out = [torch.empty(256) for _ in range(2)]
        dist.all_gather(out, t, group=group)  # TP_GATHER_LINE
    else:
        dist.all_reduce(t, group=group)  # TP_REDUCE_LINE


def main():
    rank, world = init()
    g01 = dist.new_group([0, 1])
    g23 = dist.new_group([2, 3])
    warmup()
    mine = g01 if rank < 2 else g23
    for step in range(1, 6):
        say("step", step)
        tp_step(rank, mine, step)
        world_step()
    say("done")


main()
