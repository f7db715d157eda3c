# Source: https://github.com/pytorch/pytorch/issues/88000
# Bug: only rank 0 enters the broadcast; every other rank prints and leaves, rank 0 waits
#      until the NCCL watchdog fires.
# Class: direct rank condition (torch.distributed)
# expect: HK101 collective=14 branch=13
import datetime

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=5))
    if dist.get_rank() == 0:
        dist.broadcast(torch.tensor([1, 2, 3]).cuda(), 0)
    print("Rank {} done".format(dist.get_rank()))
