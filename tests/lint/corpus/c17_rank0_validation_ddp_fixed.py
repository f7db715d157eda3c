# Source: https://github.com/LibreYOLO/libreyolo/pull/594 (fix suggested in review: rank 0 validates the unwrapped module)
# expect: none
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
        result = None
        if is_main_process():
            result = self._run_validation(epoch)
        if self.is_distributed:
            dist.barrier()
        return result

    @torch.no_grad()
    def _run_validation(self, epoch):
        net = self.model.module if self.is_distributed else self.model
        total = 0.0
        for imgs, targets in self.val_loader:
            preds = net(imgs)
            total += float((preds - targets).abs().mean())
        return total
