# Excerpt in the shape of talmolab/sleap-nn sleap_nn/training/callbacks.py
# (WandBVizCallback, UnifiedVizCallback) at commit aa32c1a02e8b56668bb8d4d157b215cc2c2672a2,
# the parent of the fix 699a8e2e (PR #437). Unrelated code dropped.
from typing import Callable

from lightning.pytorch.callbacks import Callback
import wandb


class WandBVizCallback(Callback):
    """Log visualization images to wandb at the end of each training epoch."""

    def __init__(self, train_viz_fn: Callable, val_viz_fn: Callable, log_table: bool = False):
        super().__init__()
        self.train_viz_fn = train_viz_fn
        self.val_viz_fn = val_viz_fn
        self.log_table = log_table
        self.renderers = {}

    def _get_wandb_logger(self, trainer):
        from lightning.pytorch.loggers import WandbLogger

        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                return logger
        return None

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            epoch = trainer.current_epoch

            wandb_logger = self._get_wandb_logger(trainer)
            if wandb_logger is None:
                return  # No wandb logger, skip visualization logging

            train_data = self.train_viz_fn()
            val_data = self.val_viz_fn()

            log_dict = {}
            for mode_name, renderer in self.renderers.items():
                suffix = "" if mode_name == "direct" else f"_{mode_name}"
                log_dict[f"viz/train/predictions{suffix}"] = renderer.render(train_data)
                log_dict[f"viz/val/predictions{suffix}"] = renderer.render(val_data)

            if log_dict:
                log_dict["epoch"] = epoch
                wandb_logger.experiment.log(log_dict, commit=False)

            if self.log_table and "direct" in self.renderers:
                table = wandb.Table(columns=["Epoch", "Train", "Validation"], data=[[epoch]])
                wandb_logger.experiment.log({"predictions_table": table}, commit=False)

        # Sync all processes
        trainer.strategy.barrier()


class UnifiedVizCallback(Callback):
    """Generate all visualizations once per epoch and send them to every destination."""

    def __init__(self, train_pipeline, val_pipeline, log_wandb: bool = True):
        super().__init__()
        self.train_pipeline = train_pipeline
        self.val_pipeline = val_pipeline
        self.log_wandb = log_wandb

    def on_train_epoch_end(self, trainer, pl_module):
        if not trainer.is_global_zero:
            return

        epoch = trainer.current_epoch
        wandb_logger = self._get_wandb_logger(trainer) if self.log_wandb else None

        train_sample = next(self.train_pipeline)
        train_data = self._get_viz_data(train_sample)
        self._save_local_viz(train_data, "train", epoch)
        self._log_wandb_viz(train_data, "train", epoch, wandb_logger)

        val_sample = next(self.val_pipeline)
        val_data = self._get_viz_data(val_sample)
        self._save_local_viz(val_data, "validation", epoch)
        self._log_wandb_viz(val_data, "val", epoch, wandb_logger)

        # Sync all processes
        trainer.strategy.barrier()
