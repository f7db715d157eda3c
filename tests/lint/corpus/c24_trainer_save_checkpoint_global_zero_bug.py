# Source: https://github.com/alan-turing-institute/autocast/pull/386
# Bug: Lightning's trainer.save_checkpoint() ends in the strategy's barrier, so every rank must
#      call it; after fit it ran only under `if trainer.is_global_zero:`, rank 0 went one barrier
#      ahead and the job hung at the NCCL watchdog after training had finished.
# Class: library method that is collective (Lightning Trainer.save_checkpoint) under a rank
#        attribute (trainer.is_global_zero)
# expect: HK101 collective=19 branch=18
import logging

import lightning as L

log = logging.getLogger(__name__)


def train_autoencoder(model, datamodule, checkpoint_path, work_dir, save_reconstructions):
    trainer = L.Trainer(strategy="ddp", devices=2, max_epochs=1)
    trainer.fit(model=model, datamodule=datamodule)
    if trainer.is_global_zero:
        trainer.save_checkpoint(checkpoint_path)
        log.info("Saved checkpoint to %s", checkpoint_path)
        save_reconstructions(model, datamodule, work_dir)
    trainer.strategy.barrier("autoencoder-post-training-finalize")
    return trainer
