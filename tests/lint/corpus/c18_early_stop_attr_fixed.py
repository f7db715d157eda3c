# Source: https://github.com/Lightning-AI/pytorch-lightning/issues/379 (fix: the stop decision is reduced across ranks)
# expect: none
import torch
import torch.distributed as dist


class ThresholdStopping:
    def __init__(self, thresh):
        self.thresh = thresh

    def on_validation_end(self, trainer, local_batches):
        correct = sum(int(b["correct"]) for b in local_batches)
        val_acc = correct / max(len(local_batches), 1)
        stop = torch.tensor([int(val_acc > self.thresh)])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            trainer.should_stop = True


class Trainer:
    def __init__(self, model, stopper):
        self.model = model
        self.stopper = stopper
        self.should_stop = False

    def fit(self, train_loader, local_batches, epochs):
        for epoch in range(epochs):
            for b in train_loader:
                loss = self.model(b)
                dist.all_reduce(loss)
            self.stopper.on_validation_end(self, local_batches)
            if self.should_stop:
                break
        return torch.zeros(())
