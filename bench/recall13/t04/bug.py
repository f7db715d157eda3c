# Excerpt (rewritten) of xtuner/v1/rl/base/worker.py and xtuner/v1/rl/base/rollout_is.py
# at InternLM/xtuner f836e224 (main before the squash-merge of PR #1394).
import json
from typing import cast

import torch
import torch.distributed as dist

from xtuner.v1.ray.base import SingleAcceleratorWorker
from xtuner.v1.utils import get_device

DEVICE = get_device()


# ---- xtuner/v1/rl/base/rollout_is.py --------------------------------------
def merge_rollout_is_metrics(rollout_is_metrics: list[dict[str, float]], device="cuda") -> dict[str, float]:
    metrics = {}
    for key in rollout_is_metrics[0].keys():
        all_values = [m[key] for m in rollout_is_metrics]
        if "max" in key:
            max_value = torch.tensor(all_values).max().to(torch.float32).to(device)
            dist.all_reduce(max_value, op=dist.ReduceOp.MAX)
            metrics[key] = max_value.item()
        elif "min" in key:
            min_value = torch.tensor(all_values).min().to(torch.float32).to(device)
            dist.all_reduce(min_value, op=dist.ReduceOp.MIN)
            metrics[key] = min_value.item()
        else:
            mean_value = torch.tensor(all_values).mean().to(torch.float32).to(device)
            dist.all_reduce(mean_value, op=dist.ReduceOp.AVG)
            metrics[key] = mean_value.item()
    return metrics


# ---- xtuner/v1/rl/base/worker.py ------------------------------------------
class TrainingWorker(SingleAcceleratorWorker):
    def fit(self, data_batches, rollout_idx: int):
        loss_cfg = self.config.loss_cfg
        seq_ctx_list, loss_ctx_input_list, rollout_logprobs_list = self._prepare(data_batches)

        rank_grad_tokens = None
        for loss_ctx_input in loss_ctx_input_list:
            mask = loss_ctx_input.shifted_labels != -100
            grad_tokens = mask.sum()
            rank_grad_tokens = grad_tokens if rank_grad_tokens is None else rank_grad_tokens + grad_tokens
        global_grad_tokens = cast(torch.Tensor, rank_grad_tokens)
        dist.all_reduce(global_grad_tokens, op=dist.ReduceOp.SUM)

        loss_ctx_input_list = self.compute_actor_logprobs(seq_ctx_list, loss_ctx_input_list)
        sum_entropy = None

        all_rollout_is_metrics = []
        all_mismatch_metrics = []
        for i, loss_ctx_input in enumerate(loss_ctx_input_list):
            mask = loss_ctx_input.shifted_labels != -100
            entropy = -(cast(torch.Tensor, loss_ctx_input.old_logprobs) * mask).sum()
            sum_entropy = entropy if sum_entropy is None else sum_entropy + entropy

            if not mask.any():  # all padding tokens, skip
                self.logger.warning(f"Skip batch {i} as all tokens are padding.")
                continue

            if len(rollout_logprobs_list) > 0:
                # calculate importance sampling weights
                cu_seq_lens = seq_ctx_list[i].cu_seq_lens_q
                num_tokens = cu_seq_lens[1:] - cu_seq_lens[:-1]

                rollout_is_weights, rollout_is_mask, mismatch_metrics, rollout_is_metrics = (
                    loss_cfg.rollout_is.compute_rollout_importance_weights_and_metrics(
                        old_log_prob=loss_ctx_input.old_logprobs,
                        rollout_log_prob=rollout_logprobs_list[i],
                        num_tokens=num_tokens,
                        response_mask=mask,
                    )
                )
                loss_ctx_input.shifted_labels[~rollout_is_mask.bool()] = -100  # update loss mask
                loss_ctx_input.is_weights = rollout_is_weights
                all_rollout_is_metrics.append(rollout_is_metrics)
                all_mismatch_metrics.append(mismatch_metrics)

        logger_msg = f"Rollout {rollout_idx}: "

        sum_entropy = cast(torch.Tensor, sum_entropy)
        dist.all_reduce(sum_entropy, op=dist.ReduceOp.SUM)
        avg_sum_entropy = sum_entropy / global_grad_tokens if global_grad_tokens > 0 else 0
        logger_msg += f"avg entropy: {avg_sum_entropy:.4f}"

        if len(all_mismatch_metrics) > 0:
            mismatch_metrics = merge_rollout_is_metrics(all_mismatch_metrics, DEVICE)
            if len(mismatch_metrics) > 0:
                logger_msg += f"\n rollout mismatch metrics:\n{json.dumps(mismatch_metrics, indent=4)}"

        if len(all_rollout_is_metrics) > 0:
            rollout_is_metrics = merge_rollout_is_metrics(all_rollout_is_metrics, DEVICE)
            if len(rollout_is_metrics) > 0:
                logger_msg += f"\n rollout importance sampling metrics:\n{json.dumps(rollout_is_metrics, indent=4)}"
        self.logger.info(logger_msg)

        return self._train_steps(seq_ctx_list, loss_ctx_input_list, global_grad_tokens)
