# Source: https://github.com/dvl-tum/center-group/pull/2 (fix: rank_zero_only=True, no reduction)
# expect: none
import pytorch_lightning as pl


class GroupModel(pl.LightningModule):
    def validation_epoch_end(self, outputs):
        if self.global_rank == 0:
            ap = self.evaluator.evaluate(outputs)
            self.log("val/ap", ap, rank_zero_only=True)
