# Look-alike of https://github.com/dvl-tum/center-group/pull/2: every rank logs with sync_dist,
# only rank 0 prints a summary.
# expect: none
import pytorch_lightning as pl


class GroupModel(pl.LightningModule):
    def validation_epoch_end(self, outputs):
        loss = sum(o["loss"] for o in outputs) / max(len(outputs), 1)
        self.log("val/loss", loss, sync_dist=True)
        if self.global_rank == 0:
            print("validation loss", float(loss))
