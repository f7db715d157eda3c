# Repository: modelscope/ms-swift
# Fix commit: 3de574889dd8e8966b0a58a2564ac9abedfe3662 (PR #8102), after-fix shape
# Files excerpted: swift/rlhf_trainers/grpo_trainer.py (GRPOTrainer.training_step / compute_loss /
#                  _compute_loss / _compute_loss_chunked / _compute_loss_and_metrics); the backward is
#                  transformers.Trainer.training_step under DeepSpeed ZeRO-3, shortened
import torch
from accelerate.utils import gather_object
from transformers import Trainer


class GRPOTrainer(Trainer):
    dynamic_num_samples = True  # multi-turn rollouts: each rank may hold a different number of samples

    def training_step(self, model, inputs, num_items_in_batch=None):
        model.train()
        loss = self.compute_loss(model, inputs)
        # DeepSpeed ZeRO-3: the backward re-gathers each partitioned parameter through hooks on
        # the forward graph and reduce-scatters its gradient across the data-parallel ranks
        self.accelerator.backward(loss)
        return loss.detach()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return self._compute_loss(model, inputs)

    def _compute_loss(self, model, inputs):
        batch_size = inputs['input_ids'].shape[0]
        expected_bs = self.args.per_device_train_batch_size
        should_chunk = self.dynamic_num_samples and any(gather_object([batch_size > expected_bs]))
        if not should_chunk:
            loss, _ = self._compute_loss_and_metrics(model, inputs)
            return loss
        # maybe dynamic rollout num for multi-turn training
        return self._compute_loss_chunked(model, inputs)

    def _compute_loss_and_metrics(self, model, inputs):
        logits = model(input_ids=inputs['input_ids'], attention_mask=inputs['attention_mask']).logits
        per_token_logps = torch.log_softmax(logits[:, :-1], dim=-1).gather(
            -1, inputs['input_ids'][:, 1:, None]).squeeze(-1)
        mask = inputs['completion_mask'][:, 1:]
        loss = -(per_token_logps * inputs['advantages'][:, None] * mask).sum() / mask.sum().clamp(min=1)
        return loss, {'completion_tokens': mask.sum().item()}

    def get_chunked_inputs(self, inputs, start_idx, end_idx):
        return {k: v[start_idx:end_idx] for k, v in inputs.items()}

    def _compute_loss_chunked(self, model, inputs):
        """All ranks step through the same number of chunks, so that the forward
        collectives stay synchronized even when the local batch_size differs."""
        chunk_size = self.args.per_device_train_batch_size
        batch_size = inputs['input_ids'].shape[0]

        # Decide how many chunks every rank must run
        batch_sizes = gather_object([batch_size])
        chunks_per_device = [(bs + chunk_size - 1) // chunk_size for bs in batch_sizes]
        max_chunks = max(chunks_per_device)
        new_chunk_size = (batch_size + max_chunks - 1) // max_chunks

        losses, weights = [], []
        chunk_inputs = {}
        for chunk_idx in range(max_chunks):
            start_idx = chunk_idx * new_chunk_size
            end_idx = min(start_idx + new_chunk_size, batch_size)

            is_dummy = False
            if start_idx < batch_size:
                chunk_inputs = self.get_chunked_inputs(inputs, start_idx, end_idx)
                chunk_weight = end_idx - start_idx
            else:
                is_dummy = True
                chunk_weight = 0

            # forward runs max_chunks times on every rank (a dummy chunk reuses the last inputs)
            chunk_loss, chunk_metrics_data = self._compute_loss_and_metrics(model, chunk_inputs)

            if not is_dummy:
                losses.append(chunk_loss * chunk_weight)
                weights.append(chunk_weight)
            else:
                # Add dummy loss to computation graph to trigger ZeRO-3 backward hooks
                losses.append(chunk_loss * 0.0)

        # Compute weighted average loss
        total_weight = sum(weights)
        if total_weight > 0:
            final_loss = torch.stack(losses).sum() / total_weight
        else:
            final_loss = torch.stack(losses).sum()
        return final_loss
