# Excerpt (rewritten) of modelforge/train/training.py at choderalab/modelforge c1430f23
# (base of PR #313 "Dev global rank").
import time
from typing import Dict, Literal

import lightning.pytorch as pL
import torch
from loguru import logger as log
from torch.nn import ModuleDict


class TrainingAdapter(pL.LightningModule):

    def _get_energy_tensors(self, preds, targets, indices):
        preds_tensor = torch.cat(list(preds.values()))
        targets_tensor = torch.cat(list(targets.values()))
        indices_tensor = torch.cat(list(indices.values())).unique()

        # Get maximum length across all processes
        local_length = torch.tensor([preds_tensor.size(0)], device=preds_tensor.device)
        max_length = int(self.all_gather(local_length).max())

        pad_size = max_length - preds_tensor.size(0)
        if pad_size > 0:
            preds_tensor = torch.nn.functional.pad(preds_tensor, (0, pad_size))
            targets_tensor = torch.nn.functional.pad(targets_tensor, (0, pad_size))

        # Gather across processes
        gathered_preds = self.all_gather(preds_tensor)
        gathered_targets = self.all_gather(targets_tensor)
        gathered_indices = self.all_gather(indices_tensor)

        return gathered_preds, gathered_targets, gathered_indices, max_length, pad_size

    def _log_figures_for_each_phase(
        self,
        preds: Dict[str, Dict[int, torch.Tensor]],
        targets: Dict[str, Dict[int, torch.Tensor]],
        indices: Dict[int, torch.Tensor],
        phase: Literal["train", "val", "test"],
    ):
        # Gather across processes
        gathered_preds, gathered_targets, gathered_indices, max_length, pad_size = (
            self._get_energy_tensors(preds["energy"], targets["energy"], indices)
        )

        # Proceed only on main process
        if self.global_rank == 0:
            self._plot_and_log(gathered_preds, gathered_targets, max_length, pad_size, phase)

    def on_train_epoch_start(self):
        """Start the epoch timer."""
        self.epoch_start_time = time.time()

    def _log_time(self):
        """Log the time taken per epoch to W&B."""
        epoch_time = time.time() - self.epoch_start_time
        if isinstance(self.logger, pL.loggers.WandbLogger):
            self.logger.experiment.log({"epoch_time": epoch_time, "epoch": self.current_epoch})
        else:
            log.warning("Weights & Biases logger not found; epoch time not logged.")

    def on_train_epoch_end(self):
        """Logs metrics, learning rate, histograms, and figures at the end of the training epoch."""
        if self.global_rank == 0:
            self._log_metrics(self.loss_metrics, "loss")
            self._log_learning_rate()
            self._log_time()
            # log the weights of the different loss components
            for key, weight in self.loss.weights_scheduling.items():
                self.log(f"loss/{key}/weight", weight[self.current_epoch])

        # this performs gather operations and logs only at rank == 0
        self._log_figures_for_each_phase(
            self.train_preds,
            self.train_targets,
            self.train_indices,
            "train",
        )

    def _log_learning_rate(self):
        """Logs the current learning rate."""
        sch = self.lr_schedulers()
        try:
            self.log(
                "lr", sch.get_last_lr()[0], on_epoch=True, prog_bar=True, sync_dist=True
            )
        except AttributeError:
            pass

    def _log_metrics(self, metrics: ModuleDict, phase: str):
        """Log all accumulated metrics for a given phase."""
        abbreviate = {
            "MeanAbsoluteError": "mae",
            "MeanSquaredError": "rmse",
            "MeanMetric": "mse",
        }

        for prop, metric_collection in metrics.items():
            for metric_name, metric in metric_collection.items():
                metric_value = metric.compute()
                metric.reset()
                self.log(
                    f"{phase}/{prop}/{abbreviate[metric_name]}",
                    metric_value,
                    prog_bar=True,
                    sync_dist=True,
                )
