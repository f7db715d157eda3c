# Source: https://github.com/Project-MONAI/monai-physio/pull/137 (review of train_physicsnemo_base.py)
# Bug: each rank tests its own batch's loss and skips the batch when it is not finite; the
#      model is wrapped in DistributedDataParallel, so the ranks that go on block in the
#      gradient all-reduce of `loss.backward()` while the skipping rank runs its next forward.
# Class: autograd's backward under a module wrapper is a collective; rank-local (NaN) continue
# expect: HK202 collective=34 branch=29
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
            # this rank's batch only
            if not torch.isfinite(loss):
                print("epoch %d: non-finite loss; skipping this batch" % (epoch + 1))
                continue
            self.optimizer.zero_grad()
            # DDP reduces the gradients here
            loss.backward()
            self.optimizer.step()
            total += loss.item()
            count += 1
        return self._reduce_sums(total, count)
