# Look-alike of https://github.com/Project-MONAI/monai-physio/pull/137: the batch is skipped on
# a non-finite gradient norm, tested after the backward: DDP has all-reduced the gradients, so
# every rank computes the same norm and skips the step together.
# expect: none
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class Trainer:
    def __init__(self, net, optimizer, batches, device):
        self.model = DistributedDataParallel(net, device_ids=[device])
        self.optimizer = optimizer
        self.batches = batches

    def _reduce_sums(self, total, count):
        t = torch.tensor([total, count], dtype=torch.float64)
        dist.all_reduce(t)
        return t[0].item() / max(t[1].item(), 1.0)

    def train_epoch(self, epoch):
        total, count = 0.0, 0
        for inputs, target in self.batches:
            pred = self.model(inputs)
            loss = torch.nn.functional.mse_loss(pred, target)
            self.optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            if not torch.isfinite(grad_norm):
                print("epoch %d: non-finite gradients; skipping this step" % (epoch + 1))
                continue
            self.optimizer.step()
            total += loss.item()
            count += 1
        return self._reduce_sums(total, count)
