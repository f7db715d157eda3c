# Excerpt in the shape of bghira/SimpleTuner simpletuner/helpers/training/trainer.py at 5be3f87e3^
# (before "(#2712) check whether any ranks have completed their epoch ..."). Unrelated code dropped.
import torch

from simpletuner.helpers.data_backend.runtime import random_dataloader_iterator
from simpletuner.helpers.training.state_tracker import StateTracker


class Trainer:
    def _should_checkpoint_epoch(self, epoch: int) -> bool:
        interval = self._checkpoint_epoch_interval()
        if interval is None or epoch is None:
            return False
        return epoch > 0 and epoch % interval == 0

    def _run_standard_checkpoint(self, webhook_message, parent_loss, epoch, *, upload_to_hub=False):
        if self.accelerator.is_main_process and self.config.checkpoints_total_limit is not None:
            self.checkpoint_state_cleanup(self.config.output_dir, self.config.checkpoints_total_limit)

        save_path = None
        if self.accelerator.is_main_process or self.config.use_deepspeed_optimizer or self.config.fsdp_enable:
            save_path = self.checkpoint_state_save(self.config.output_dir)
        return save_path

    def checkpoint_state_save(self, output_dir, suffix=None):
        save_path = f"{output_dir}/checkpoint-{self.state['global_step']}"
        self.accelerator.save_state(save_path)
        return save_path

    def train(self):
        self.accelerator.wait_for_everyone()
        step = self.state["global_step"]
        iterator_fn = random_dataloader_iterator
        for epoch in range(self.state["first_epoch"], self.num_epochs_to_track):
            epoch_checkpoint_pending = False
            last_step_saved_checkpoint = False
            train_backends = {}
            for backend_id, backend in StateTracker.get_data_backends().items():
                if StateTracker.backend_status(backend_id) or "train_dataloader" not in backend:
                    continue
                train_backends[backend_id] = backend["train_dataloader"]
            iterator_args = [train_backends]

            while True:
                self._exit_on_signal()
                step += 1
                raw_batch = iterator_fn(step, *iterator_args)
                prepared_batch = self.prepare_batch(raw_batch)

                # If we receive a False from the enumerator, we know we reached the next epoch.
                if prepared_batch is False:
                    if (
                        self._should_checkpoint_epoch(epoch)
                        and not last_step_saved_checkpoint
                        and self.state["global_step"] > self.state["global_resume_step"]
                    ):
                        epoch_checkpoint_pending = True
                    break

                with self.accelerator.accumulate(self.model.get_trained_component()):
                    model_pred = self.model_predict(prepared_batch)
                    loss = self._calculate_loss(prepared_batch, model_pred)

                    # Gather the losses across all processes for logging (if using distributed training)
                    avg_loss = self.accelerator.gather(loss.repeat(self.config.train_batch_size)).mean()
                    self.train_loss += avg_loss.item() / self.config.gradient_accumulation_steps

                    self.accelerator.backward(loss)
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)

                self.accelerator.wait_for_everyone()

                if self.state["global_step"] >= self.config.max_train_steps:
                    break

            if epoch_checkpoint_pending:
                self._run_standard_checkpoint(f"Epoch {epoch} completed", None, epoch)
