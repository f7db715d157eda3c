# Excerpt in the shape of NVIDIA-NeMo/Automodel nemo_automodel/recipes/llm/train_dflash.py
# at commit 8404e920033e245d1d554ded0f535e1b6cbb44fb (parent of fix db0e7a26f, PR #2468).
# Unrelated code dropped.
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from nemo_automodel.components.speculative.dflash.core import NoValidAnchorsError
from nemo_automodel.recipes.base_recipe import BaseRecipe
from nemo_automodel.recipes.llm._spec_train_utils import should_sync_grads


def _all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        value = value / dist.get_world_size()
    return value


class TrainDFlashRecipe(BaseRecipe):
    def _run_eval(self):
        total_loss = torch.zeros((), device=self.device)
        total_batches = torch.zeros((), device=self.device)
        for batch in self.val_dataloader:
            metrics = self.trainer_module(**batch)
            total_loss += metrics.loss.detach()
            total_batches += 1
        total_loss = _all_reduce_mean(total_loss)
        total_batches = _all_reduce_mean(total_batches)
        return {"val_loss": (total_loss / total_batches.clamp_min(1)).item()}

    def run_train_validation_loop(self):
        self.trainer_module.train()
        for epoch_idx in range(self.num_epochs):
            pending_micro_batches = 0
            num_batches = len(self.train_dataloader)
            is_ddp = isinstance(self.trainer_module, DistributedDataParallel)
            for batch_idx, batch in enumerate(self.train_dataloader):
                batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
                target_batch = self.target_wrapper.generate_batch(
                    input_ids=batch["input_ids"],
                    attention_mask=batch["attention_mask"],
                    loss_mask=batch["loss_mask"],
                )
                sync_grads = should_sync_grads(
                    pending_micro_batches=pending_micro_batches,
                    grad_accumulation_steps=self.grad_accumulation_steps,
                    batch_idx=batch_idx,
                    batches_per_epoch=num_batches,
                    is_ddp=is_ddp,
                )
                sync_ctx = nullcontext() if sync_grads else self.trainer_module.no_sync()
                try:
                    with sync_ctx:
                        metrics = self.trainer_module(
                            input_ids=target_batch.input_ids,
                            hidden_states=target_batch.hidden_states,
                            loss_mask=target_batch.loss_mask,
                        )
                        loss = metrics.loss / self.grad_accumulation_steps
                        loss.backward()
                except NoValidAnchorsError:
                    # Every sample in this micro-batch is too short to form a block;
                    # nothing to learn from it. Skip without touching the
                    # accumulation counters. (No backward ran, so grads are intact.)
                    # NOTE: under DDP this skip is per-rank and data-dependent; pre-filter
                    # short samples for multi-rank runs to keep optimizer steps in lockstep.
                    self._skipped_micro_batches += 1
                    continue

                pending_micro_batches += 1
                if pending_micro_batches == self.grad_accumulation_steps:
                    torch.nn.utils.clip_grad_norm_(self.trainer_module.parameters(), self.max_grad_norm)
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
                    self.lr_scheduler.step()
                    pending_micro_batches = 0

            eval_metrics = self._run_eval()
