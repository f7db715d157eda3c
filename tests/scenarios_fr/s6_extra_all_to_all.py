"""Scenario 6: in the context-parallel group {2,3}, rank 3 computes a plan that issues one extra all_to_all."""
import torch
import torch.distributed as dist

from _common import init, say, warmup, world_step


def cp_plan(rank, step):
    return 2 if (rank == 3 and step == 3) else 1


def cp_exchange(group, rounds):
    for _ in range(rounds):
        inp = torch.ones(4)
        out = torch.empty(4)
        dist.all_to_all_single(out, inp, group=group)  # CP_LINE


def main():
    rank, world = init()
    g01 = dist.new_group([0, 1])
    g23 = dist.new_group([2, 3])
    warmup()
    for step in range(1, 6):
        say("step", step)
        if rank >= 2:
            cp_exchange(g23, cp_plan(rank, step))
        world_step()
    say("done")


main()
