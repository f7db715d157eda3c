# Look-alike of https://github.com/pytorch/pytorch/issues/88000: rank 0 fills and broadcasts,
# the others broadcast in the else branch (complementary branches, same collective).
# expect: none
import torch
import torch.distributed as dist


def share_config(values):
    if dist.get_rank() == 0:
        t = torch.tensor(values, dtype=torch.float32)
        dist.broadcast(t, src=0)
    else:
        t = torch.empty(len(values))
        dist.broadcast(t, src=0)
    if dist.get_rank() == 0:
        print("config sent:", t.tolist())
    return t
