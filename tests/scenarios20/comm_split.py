"""Communicator splits: one rank picks the wrong sub-group, and releases itself through it.

pytorch/pytorch#130102 (https://github.com/pytorch/pytorch/issues/130102: "Distributed hangs
when doing hierachical communication": ranks pick their sub-group by a rank test, and a barrier
on a sub-group waits for ranks that never come). Here every rank builds both pipeline groups
{0,1} and {2,3} in the same order; at step 3 a rebalancing test moves rank 1 to stage 1 on rank 1
alone. Rank 1 is no member of {2,3}, so torch lets its all_reduce through at once (a warning, no
work) and rank 1 goes on to the world barrier with ranks 2,3, while rank 0 waits on {0,1} for it.
The stacks alone point at rank 0 (alone at the pipeline line); the groups' membership says rank 1.
"""
import time

import torch
import torch.distributed as dist

from _job import init, say


def pick_group(groups, rank, step):
    stage = rank // 2
    if rank == 1 and step == 3:  # BRANCH_LINE (a rebalance decided on this rank only)
        stage = 1
    return groups[stage]


def main():
    rank, _ = init()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    for step in range(1, 6):
        grp = pick_group(groups, rank, step)
        dist.all_reduce(torch.ones(8), group=grp)  # PP_LINE
        dist.barrier()  # WORLD_LINE
        say("step", step)
        time.sleep(0.05)
    say("done")


if __name__ == "__main__":
    main()
