# Source: https://github.com/Lightning-AI/pytorch-lightning/issues/379
# Bug: the stopping callback compares a metric computed on this rank's own validation batches;
#      it sets should_stop on some ranks only, those leave fit() while the others wait in the
#      next epoch's all_reduce.
# Class: a predicate set in one method (on_validation_end) and tested in another (fit)
# expect: HK202 collective=32 branch=34
import torch
import torch.distributed as dist


class ThresholdStopping:
    def __init__(self, thresh):
        self.thresh = thresh

    def on_validation_end(self, trainer, local_batches):
        correct = sum(int(b["correct"]) for b in local_batches)
        val_acc = correct / max(len(local_batches), 1)
        if val_acc > self.thresh:
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
