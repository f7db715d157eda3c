# Source: https://github.com/pytorch/pytorch/issues/88000 (the shape the docs ask for)
# Fixed: every rank calls broadcast; only the source fills the buffer.
# expect: none
import datetime

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=5))
    t = torch.zeros(3).cuda()
    if dist.get_rank() == 0:
        t = torch.tensor([1.0, 2.0, 3.0]).cuda()
    dist.broadcast(t, 0)
    print("Rank {} done".format(dist.get_rank()))
