"""A collective called without the process group its peers pass.

vllm-project/vllm#3401 (https://github.com/vllm-project/vllm/issues/3401: "dist.broadcast miss
group argument ... this call will hang all workers") and areal-project/AReaL#311
(https://github.com/areal-project/AReaL/pull/311: "the collective communication will get stuck
if data parallel group is not the world group"): the
tensor-parallel groups are {0,1} and {2,3}; at step 3 rank 3 takes the fallback path that calls
the all_reduce without ``group=``, so it waits on the world group while rank 2 waits on {2,3}.
"""
import time

import torch
import torch.distributed as dist

from _job import init, say


def tp_reduce(t, tp_group, rank, step):
    group = tp_group
    if rank == 3 and step == 3:  # BRANCH_LINE
        group = None  # the fallback path forgets the group
    dist.all_reduce(t, group=group)  # TP_LINE
    return t


def main():
    rank, _ = init()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    tp_group = groups[rank // 2]
    for step in range(1, 6):
        tp_reduce(torch.ones(8), tp_group, rank, step)
        dist.barrier()  # WORLD_LINE
        say("step", step)
        time.sleep(0.05)
    say("done")


if __name__ == "__main__":
    main()
