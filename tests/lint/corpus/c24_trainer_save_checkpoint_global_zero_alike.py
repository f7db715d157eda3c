# Source: https://github.com/alan-turing-institute/autocast/pull/386
# Look-alike: rank 0 alone writes the weights with torch.save (no collective inside), then every
#      rank meets in the barrier.
# expect: none
import logging

import lightning as L
import torch

log = logging.getLogger(__name__)


def train_autoencoder(model, datamodule, checkpoint_path, work_dir, save_reconstructions):
    trainer = L.Trainer(strategy="ddp", devices=2, max_epochs=1)
    trainer.fit(model=model, datamodule=datamodule)
    if trainer.is_global_zero:
        torch.save(model.state_dict(), checkpoint_path)
        log.info("Saved weights to %s", checkpoint_path)
        save_reconstructions(model, datamodule, work_dir)
    trainer.strategy.barrier("autoencoder-post-training-finalize")
    return trainer
