# Source: https://github.com/LibreYOLO/libreyolo/pull/594 (review finding "Rank-Zero Validation Can Deadlock")
# Bug: the other ranks wait in a barrier and return; rank 0 validates through the live
#      DistributedDataParallel model, whose forward broadcasts buffers to every rank: rank 0
#      waits in that broadcast, the others in the barrier.
# Class: library method that is collective (DDP forward), rank-dependent early return
# expect: HK102 collective=36|27 branch=23
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def is_main_process():
    return not dist.is_initialized() or dist.get_rank() == 0


class Trainer:
    def __init__(self, model, device, val_loader, distributed):
        self.is_distributed = distributed
        self.val_loader = val_loader
        self.model = DDP(model, device_ids=[device]) if distributed else model

    def validate(self, epoch):
        if self.is_distributed and not is_main_process():
            dist.barrier()
            return None
        try:
            return self._run_validation(epoch)
        finally:
            if self.is_distributed:
                dist.barrier()

    @torch.no_grad()
    def _run_validation(self, epoch):
        total = 0.0
        for imgs, targets in self.val_loader:
            preds = self.model(imgs)
            total += float((preds - targets).abs().mean())
        return total
