# Excerpt (rewritten) of olmo/torch_util.py and olmo/train.py at allenai/OLMo 6d42d7ab
# ("Fix hang when training is canceled").
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Optional, Tuple, TypeVar

import torch
import torch.distributed as dist
import wandb

log = logging.getLogger(__name__)


# ---- olmo/torch_util.py ---------------------------------------------------
def get_global_rank() -> int:
    return int(os.environ.get("RANK") or dist.get_rank())


V = TypeVar("V", bool, int, float)


def synchronize_value(value: V, device: torch.device) -> V:
    if dist.is_available() and dist.is_initialized():
        value_tensor = torch.tensor(value, device=device)
        dist.broadcast(value_tensor, 0)
        return value_tensor.item()  # type: ignore
    else:
        return value


def synchronize_flag(flag: bool, device: torch.device) -> bool:
    return synchronize_value(flag, device)


# ---- olmo/train.py ---------------------------------------------------------
@dataclass
class Trainer:
    cfg: "TrainConfig"
    device: torch.device
    global_step: int = 0

    def check_if_cancelled(self) -> Tuple[bool, int]:
        should_cancel = False
        cancel_reason: Optional[str] = None
        extra_steps = 0
        if get_global_rank() == 0:
            if self.cfg.time_limit is not None and time.time() - self._start_time >= self.cfg.time_limit:
                # First check if we've reached the training time limit.
                should_cancel = True
                cancel_reason = "time limit reached"
                extra_steps = self.cfg.extra_steps_after_cancel
            elif (
                self.cfg.early_stopping_factor is not None
                and self.global_step > self.cfg.scheduler.t_warmup
                and self.cur_train_loss > self.cfg.early_stopping_factor * self.min_train_loss
            ):
                # Next check if early stopping loss criteria is met.
                should_cancel = True
                cancel_reason = "early stopping from loss increase"
            elif wandb.run is not None and (api_key := os.environ.get("WANDB_API_KEY")) is not None:
                # Finally, check if someone canceled the run from W&B by adding the 'cancel' tag.
                api = wandb.Api(api_key=api_key)
                run = api.run(wandb.run.path)
                for tag in run.tags or []:
                    if tag.lower() in {"cancel", "canceled", "cancelled"}:
                        should_cancel = True
                        cancel_reason = "Weights & Biases tag"
                        extra_steps = self.cfg.extra_steps_after_cancel
                        break

        run_canceled = synchronize_flag(should_cancel, self.device)
        if run_canceled:
            extra_steps = synchronize_value(extra_steps, self.device)
            if cancel_reason is None:
                if extra_steps > 0:
                    log.warning(f"Run canceled, stopping in {extra_steps} more steps...")
                else:
                    log.warning("Run canceled")
            else:
                if extra_steps > 0:
                    log.warning(f"Run canceled due to {cancel_reason}, stopping in {extra_steps} more steps...")
                else:
                    log.warning(f"Run canceled due to {cancel_reason}")

        return run_canceled, extra_steps

    def fit(self):
        self._start_time = time.time()
        cancel_initiated: bool = False
        stop_at: Optional[int] = self.cfg.stop_at
        for batch in self.train_loader:
            self.global_step += 1
            metrics = self.train_step(batch)

            # Check if/when run should be canceled.
            if not cancel_initiated and self.global_step % self.cfg.canceled_check_interval == 0:
                cancel_initiated, extra_steps = self.check_if_cancelled()
                if cancel_initiated:
                    stop_at = (
                        self.global_step + extra_steps
                        if stop_at is None
                        else min(self.global_step + extra_steps, stop_at)
                    )

            if stop_at is not None and self.global_step >= stop_at:
                break
