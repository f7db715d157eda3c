# Source: https://github.com/sgl-project/sglang/pull/26923 (always enter the all_reduce; an empty rank contributes 0)
# expect: none
import torch
import torch.distributed as dist


class HiCache:
    def __init__(self, tp_group):
        self.tp_group = tp_group
        self.ongoing_write_through = {}

    def writing_check(self):
        finish_count = 0
        for ack_id, event in list(self.ongoing_write_through.items()):
            if not event.query():
                break
            finish_count += 1
        queue_size = torch.tensor(finish_count, dtype=torch.int)
        dist.all_reduce(queue_size, op=dist.ReduceOp.MIN, group=self.tp_group)
        for _ in range(queue_size.item()):
            self.ongoing_write_through.pop(next(iter(self.ongoing_write_through)))
