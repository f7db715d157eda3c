# Source: https://github.com/alan-turing-institute/autocast/pull/386
# Fix: every rank saves (the barrier inside is collective); only the log line and the
#      reconstruction plots stay on rank 0.
# expect: none
import logging

import lightning as L

log = logging.getLogger(__name__)


def train_autoencoder(model, datamodule, checkpoint_path, work_dir, save_reconstructions):
    trainer = L.Trainer(strategy="ddp", devices=2, max_epochs=1)
    trainer.fit(model=model, datamodule=datamodule)
    trainer.save_checkpoint(checkpoint_path)
    if trainer.is_global_zero:
        log.info("Saved checkpoint to %s", checkpoint_path)
        save_reconstructions(model, datamodule, work_dir)
    trainer.strategy.barrier("autoencoder-post-training-finalize")
    return trainer
