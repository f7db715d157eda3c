# Excerpt in the shape of huggingface/transformers src/transformers/trainer.py (v4.50-4.56),
# before PR #40923. Unrelated code dropped.
import os

import torch.distributed as dist

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, SaveStrategy
from transformers.training_args import ParallelMode
from transformers.utils import is_sagemaker_mp_enabled, is_torch_xla_available

if is_torch_xla_available():
    import torch_xla.core.xla_model as xm

if is_sagemaker_mp_enabled():
    import smdistributed.modelparallel.torch as smp


class Trainer:
    def _inner_training_loop(self, batch_size=None, args=None, resume_from_checkpoint=None, trial=None,
                             ignore_keys_for_eval=None):
        model = self.model_wrapped
        for epoch in range(self.epochs_trained, self.num_train_epochs):
            for step, inputs in enumerate(self.epoch_iterator):
                tr_loss_step = self.training_step(model, inputs)
                self.tr_loss += tr_loss_step
                self._maybe_log_save_evaluate(self.tr_loss, None, model, trial, epoch, ignore_keys_for_eval)
            self._maybe_log_save_evaluate(self.tr_loss, None, model, trial, epoch, ignore_keys_for_eval)
            if self.control.should_training_stop:
                break

        if args.load_best_model_at_end and self.state.best_model_checkpoint is not None:
            # Wait for everyone to get here so we are sure the model has been saved by process 0.
            if is_torch_xla_available():
                xm.rendezvous("load_best_model_at_end")
            elif args.parallel_mode == ParallelMode.DISTRIBUTED:
                dist.barrier()
            elif is_sagemaker_mp_enabled():
                smp.barrier()

            self._load_best_model()

        return self.tr_loss

    def _maybe_log_save_evaluate(self, tr_loss, grad_norm, model, trial, epoch, ignore_keys_for_eval):
        metrics = None
        if self.control.should_evaluate:
            metrics = self._evaluate(trial, ignore_keys_for_eval)
            is_new_best_metric = self._determine_best_metric(metrics=metrics, trial=trial)
            if self.args.save_strategy == SaveStrategy.BEST:
                self.control.should_save = is_new_best_metric

        if self.control.should_save:
            self._save_checkpoint(model, trial)
            self.control = self.callback_handler.on_save(self.args, self.state, self.control)

    def _save_checkpoint(self, model, trial):
        checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"

        run_dir = self._get_output_dir(trial=trial)
        output_dir = os.path.join(run_dir, checkpoint_folder)
        self.save_model(output_dir, _internal_call=True)

        if self.args.save_strategy in [SaveStrategy.STEPS, SaveStrategy.EPOCH] and self.state.best_global_step:
            best_checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.best_global_step}"
            best_checkpoint_dir = os.path.join(run_dir, best_checkpoint_folder)

            if os.path.exists(best_checkpoint_dir):
                self.state.best_model_checkpoint = best_checkpoint_dir

        if not self.args.save_only_model:
            self._save_optimizer_and_scheduler(output_dir)
            self._save_rng_state(output_dir)

    def save_model(self, output_dir=None, _internal_call=False):
        # only the main process (args.should_save) writes the checkpoint directory
        if self.args.should_save:
            self._save(output_dir)

    def _save(self, output_dir=None, state_dict=None):
        os.makedirs(output_dir, exist_ok=True)
        self.model.save_pretrained(output_dir, state_dict=state_dict)
