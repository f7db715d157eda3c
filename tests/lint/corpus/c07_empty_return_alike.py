# Look-alike of https://github.com/sgl-project/sglang/pull/26923: an early return on a setting
# that is the same on every rank (the cache is disabled for the whole server).
# expect: none
import torch
import torch.distributed as dist


class HiCache:
    def __init__(self, tp_group, enabled):
        self.tp_group = tp_group
        self.enabled = enabled
        self.pending = 0

    def writing_check(self):
        if not self.enabled:
            return
        queue_size = torch.tensor(self.pending, dtype=torch.int)
        dist.all_reduce(queue_size, op=dist.ReduceOp.MIN, group=self.tp_group)
        self.pending -= queue_size.item()
