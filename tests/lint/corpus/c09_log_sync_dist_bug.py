# Source: https://github.com/dvl-tum/center-group/pull/2
# Bug: validation metrics are logged only on global rank 0, but self.log(..., sync_dist=True)
#      reduces the value across processes: rank 0 waits in the reduction alone.
# Class: library method that is collective (LightningModule.log with sync_dist=True)
# expect: HK101 collective=13 branch=11
import pytorch_lightning as pl


class GroupModel(pl.LightningModule):
    def validation_epoch_end(self, outputs):
        if self.global_rank == 0:
            ap = self.evaluator.evaluate(outputs)
            self.log("val/ap", ap, sync_dist=True)
