import os

import torch
import torch.distributed as dist


class DistribTorch:
    _instance = None

    def __init__(self):
        self.global_rank = int(os.environ.get('RANK', '-1'))
        self.world_size = int(os.environ.get('WORLD_SIZE', '-1'))
        self._model = None

    @classmethod
    def instance(cls):
        if not cls._instance:
            cls._instance = cls()
        return cls._instance

    @property
    def is_distributed(self):
        return self.world_size > 1

    @property
    def is_global_main(self):
        return self.global_rank <= 0

    def barrier(self):
        if self.is_distributed:
            torch.distributed.barrier()

    def average_gradients(self, model):
        size = float(self.world_size)
        for param in model.parameters():
            dist.all_reduce(param.grad.data, op=dist.ReduceOp.SUM)
            param.grad.data /= size

    def step(self, optimizer):
        if self.is_distributed:
            self.average_gradients(self._model)
        optimizer.step()
        optimizer.zero_grad()


dtorch = DistribTorch.instance()


class TransformerTrainer:
    def train(self, train_data, val_data, stopper, check_point):
        distr = DistribTorch.instance()
        early_stopped = False
        for batch_count, batch in enumerate(train_data):
            out = self.model(batch.x_seqs, batch.y_seqs)
            loss = self.criterion(out, batch.y_seqs)
            loss.backward()
            dtorch.step(self.opt)

            if batch_count % check_point == 0:
                if distr.is_global_main:
                    with torch.no_grad():
                        val_metrics = self.run_valid_epoch(val_data)
                        self.make_check_point(val_loss=val_metrics['loss'])
                    stopper.validation(val_metrics['loss'])
                    if stopper.is_stop():
                        early_stopped = True
                        break
                distr.barrier()

        # End of training
        distr.barrier()
        return early_stopped
