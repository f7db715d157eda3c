# Repository: https://github.com/NVIDIA/NeMo
# Commit (fix): afe9ccb2bce6d6d83980a8750841a0611f50c7aa (merge of PR #578); before: 16b10e7c7c7fb94545df8e2968e5c8521bbbab5e
# Files excerpted: nemo/backends/pytorch/actions.py (PtActions.train main loop, PtActions._eval, PtActions._check_nan_or_inf),
#                  nemo/core/neural_factory.py (Actions._perform_on_iteration_end),
#                  nemo/core/callbacks.py (ActionCallback.step, EvaluatorCallback.on_iteration_end)
from contextlib import ExitStack

import torch
import torch.distributed as dist

from nemo import logging
from nemo.backends.pytorch.optimizers import master_params
from nemo.core import DeviceType
from nemo.core.neural_factory import Optimization

AmpOptimizations = {
    Optimization.mxprO0: "O0",
    Optimization.mxprO1: "O1",
    Optimization.mxprO2: "O2",
    Optimization.mxprO3: "O3",
}


# ---- nemo/core/callbacks.py ----
class ActionCallback:
    @property
    def step(self):
        return self.action.step


class EvaluatorCallback(ActionCallback):
    def on_iteration_end(self):
        if self.step == 0 and not self._eval_at_start:
            return
        if self.step % self._eval_frequency == 0:
            if self.global_rank == 0 or self.global_rank is None:
                logging.info('Doing Evaluation ' + '.' * 30)
            self.action._eval(self._eval_tensors, self, self.step)


# ---- nemo/core/neural_factory.py ----
class Actions:
    def _perform_on_iteration_end(self, callbacks):
        if callbacks is not None and isinstance(callbacks, list) and len(callbacks) > 0:
            for callback in callbacks:
                callback.on_iteration_end()


# ---- nemo/backends/pytorch/actions.py ----
class PtActions(Actions):
    def _eval(self, tensors_2_evaluate, callback, step, verbose=False):
        with torch.no_grad():
            ...
            for epoch_i, data in enumerate(eval_dataloader, 0):
                ...
                for t2e in tensors_2_evaluate:
                    key = t2e.unique_name
                    if is_distributed:
                        # where we will all_gather results from all workers
                        tensors_list = []
                        # where we will all_gather tensor sizes
                        tensor_on_worker = registered_e_tensors[key]
                        if tensor_on_worker.shape != torch.Size([]):
                            tensor_on_worker_size_as_tensor = torch.tensor(tensor_on_worker.shape).cuda()
                            sizes = []
                            for ind in range(world_size):
                                sizes.append(torch.empty_like(tensor_on_worker_size_as_tensor))
                            dist.all_gather(sizes, tensor_on_worker_size_as_tensor)
                            mx_dim, _ = torch.max(torch.stack(sizes), dim=0)
                        ...
                        dist.all_gather(tensors_list, t_to_send)

    def _check_nan_or_inf(self, placement_gpu, nan_or_inf, steps_per_nan_check=None):
        # Note that nan_or_inf only gets set if stop_on_nan loss is True, or if using O0/not using apex.amp.
        if not placement_gpu:
            return
        if steps_per_nan_check is None or self.step % steps_per_nan_check == 0:
            world_size = dist.get_world_size()
            # We use dtype=int because nccl backend doesn't support torch.bool
            nan_inf_tensor = torch.tensor(nan_or_inf, dtype=int).cuda()
            nan_inf_results = []
            for _ in range(world_size):
                nan_inf_results.append(torch.empty_like(nan_inf_tensor))
            dist.all_gather(nan_inf_results, nan_inf_tensor)
            for nan_inf in nan_inf_results:
                if nan_inf:
                    raise ValueError('Terminating due to previous NaN or inf.')

    def train(self, tensors_to_optimize, optimizer=None, optimization_params=None, callbacks=None,
              lr_policy=None, batches_per_step=None, stop_on_nan_loss=False, steps_per_nan_check=100,
              **kwargs):
        ...
        placement_gpu = dataNM.placement == DeviceType.AllGpu
        ...
        nan_or_inf = False

        # MAIN TRAINING LOOP
        # iteration over epochs
        while num_epochs is None or self.epoch_num < num_epochs:
            if train_sampler is not None:
                train_sampler.set_epoch(self.epoch_num)
            if max_steps is not None and self.step >= max_steps:
                break

            # iteration over batches in epoch
            batch_counter = 0
            for _, data in enumerate(train_dataloader, 0):
                if max_steps is not None and self.step >= max_steps:
                    break

                if batch_counter == 0:
                    # Started step, zero gradients
                    curr_optimizer = training_loop[self.step % len(training_loop)][0]
                    curr_optimizer.zero_grad()
                ...
                disable_allreduce = batch_counter < (batches_per_step - 1)
                self.__nm_graph_forward_pass(
                    call_chain=curr_call_chain, registered_tensors=registered_tensors,
                )

                curr_tensors_to_optimize = training_loop[self.step % len(training_loop)][1]
                final_loss = 0
                for tensor in curr_tensors_to_optimize:
                    if (
                        torch.isnan(registered_tensors[tensor.unique_name]).any()
                        or torch.isinf(registered_tensors[tensor.unique_name]).any()
                    ):
                        if (
                            (stop_on_nan_loss)
                            or (self._optim_level not in AmpOptimizations)
                            or (self._optim_level == Optimization.mxprO0)
                        ):
                            # Set flag here and terminate at next all_gather check.
                            nan_or_inf = True
                            logging.warning(
                                'Loss is NaN or inf at step %d, will terminate within the'
                                ' next steps_per_nan_check steps',
                                self.step,
                            )
                        else:
                            logging.warning('Loss is NaN or inf, continuing training')
                    final_loss += registered_tensors[tensor.unique_name]

                # no AMP optimizations needed
                # multi-GPU, float32
                if self._local_rank is not None:
                    if disable_allreduce:
                        with ExitStack() as stack:
                            for mod in self.get_DDP_modules(curr_call_chain):
                                stack.enter_context(mod.no_sync())
                            final_loss.backward(bps_scale.to(final_loss.get_device()))
                    else:
                        final_loss.backward(bps_scale.to(final_loss.get_device()))

                # Check if we should terminate due to NaN/inf on any workers.
                self._check_nan_or_inf(placement_gpu, nan_or_inf, steps_per_nan_check=steps_per_nan_check)

                batch_counter += 1

                if batch_counter == batches_per_step:
                    # Ended step. Do optimizer update
                    if grad_norm_clip is not None:
                        torch.nn.utils.clip_grad_norm_(master_params(curr_optimizer), grad_norm_clip)
                    curr_optimizer.step()
                    batch_counter = 0
                    self._perform_on_iteration_end(callbacks=callbacks)
                    self.step += 1
            self.epoch_num += 1

        # Check again if we should stop on NaN/inf
        self._check_nan_or_inf(placement_gpu, nan_or_inf)

        self._perform_on_action_end(callbacks=callbacks)
