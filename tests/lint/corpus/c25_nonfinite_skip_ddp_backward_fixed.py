# Source: https://github.com/Project-MONAI/monai-physio/pull/137 (fix proposed in the review:
# decide the skip collectively)
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
            bad = torch.tensor(0.0 if torch.isfinite(loss) else 1.0)
            # every rank skips when any rank's loss is not finite
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
            if bad.item() > 0:
                print("epoch %d: non-finite loss on some rank; skipping this batch" % (epoch + 1))
                continue
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            total += loss.item()
            count += 1
        return self._reduce_sums(total, count)
