# Repository: https://github.com/NVIDIA/NeMo
# Commit (before fix): 16b10e7c7c7fb94545df8e2968e5c8521bbbab5e
# Files excerpted: nemo/backends/pytorch/actions.py (PtActions.train main loop, PtActions._eval),
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

    def train(self, tensors_to_optimize, optimizer=None, optimization_params=None, callbacks=None,
              lr_policy=None, batches_per_step=None, stop_on_nan_loss=False, **kwargs):
        ...
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
                nan = False
                for tensor in curr_tensors_to_optimize:
                    if (
                        torch.isnan(registered_tensors[tensor.unique_name]).any()
                        or torch.isinf(registered_tensors[tensor.unique_name]).any()
                    ):
                        if stop_on_nan_loss:
                            raise ValueError('Loss is NaN or inf - exiting')
                        logging.warning('Loss is NaN or inf')
                        curr_optimizer.zero_grad()
                        nan = True
                        break
                    final_loss += registered_tensors[tensor.unique_name]
                if nan:
                    continue
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
        self._perform_on_action_end(callbacks=callbacks)
