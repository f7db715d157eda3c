"""A 4-rank gloo job where three ranks broadcast a Python object and one rank does not.

Launched by torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); the watchdog is armed by
the job environment. Ranks 0, 1, 2 call ``dist.broadcast_object_list(obj, src=1)``;
rank 3 takes a rank-local branch and waits in ``dist.all_reduce`` at another line, on a
process group of ranks 2 and 3 (its own group, so that gloo never matches its messages
with the broadcast's: it really waits). Inside
``broadcast_object_list`` torch runs two broadcasts (the sizes, then the pickled bytes),
and gloo's broadcast is a tree in which root 1 forwards to rank 3 itself: the root blocks
in the first broadcast (its send to rank 3 is never received) while receivers 0 and 2 got
the sizes and wait in the second. Two internal lines and sequence ids, one user line in
one user-called API.
"""
import datetime

import torch
import torch.distributed as dist


def share_config(rank):
    obj = [{"lr": 0.1, "from": rank}]
    dist.broadcast_object_list(obj, src=1)  # POSITION bcast: ranks 0-2 wait here
    return obj[0]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    pair = dist.new_group([2, 3])
    dist.barrier()
    if rank == 3:
        dist.all_reduce(torch.ones(4), group=pair)  # POSITION all_reduce: rank 3 waits here
    else:
        share_config(rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
