# Repository: lightseekorg/TorchSpec
# Commit before the fix: parent of 0fe324e966f817ff03f4860193095ad34a52ae6f (PR #32)
# Files excerpted: torchspec/models/eagle3.py (Eagle3Model._calculate_loss / forward),
#                  torchspec/training/eagle3_trainer.py (_forward / _backward),
#                  torchspec/training/fsdp.py (FSDP2 wrapping), shortened
from typing import List, Tuple

import torch
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


def compiled_forward_kl_loss(hs_flat, tp_flat, valid_idx, norm_weight, lm_head_weight, norm_eps):
    hs = hs_flat.index_select(0, valid_idx)
    logits = torch.nn.functional.rms_norm(hs, hs.shape[-1:], norm_weight, norm_eps) @ lm_head_weight.t()
    tp = tp_flat.index_select(0, valid_idx)
    loss = -(tp * torch.log_softmax(logits.float(), dim=-1)).sum(-1).mean()
    acc = (logits.argmax(-1) == tp.argmax(-1)).float().mean()
    return loss, acc


class Eagle3Model(nn.Module):
    def __init__(self, draft_model, length=7):
        super().__init__()
        self.draft_model = draft_model
        self.length = length

    def _calculate_loss(self, hidden_states, target_p, mask, idx, seq_length,
                        norm_weight, lm_head_weight, norm_eps) -> Tuple[torch.Tensor, torch.Tensor]:
        valid_idx = mask.flatten().nonzero().squeeze(-1)
        # Guard against all-masked positions to avoid nan from mean() on empty tensors.
        if valid_idx.numel() == 0:
            zero = hidden_states.new_tensor(0.0)
            return zero, zero
        hs_flat = hidden_states.reshape(-1, hidden_states.shape[-1])
        tp_step = target_p[:, idx: idx + seq_length, :]
        tp_flat = tp_step.reshape(-1, tp_step.shape[-1])
        return compiled_forward_kl_loss(hs_flat, tp_flat, valid_idx,
                                        norm_weight, lm_head_weight, norm_eps)

    def forward(self, input_ids, target_p, loss_mask, hidden_states):
        plosses, acces = [], []
        seq_length = input_ids.shape[1]
        for idx in range(self.length):
            hidden_states = self.draft_model(input_ids, hidden_states)
            loss, acc = self._calculate_loss(
                hidden_states, target_p, loss_mask, idx, seq_length,
                self.draft_model.norm.weight, self.draft_model.lm_head.weight, 1e-6)
            plosses.append(loss)
            acces.append(acc)
            loss_mask = torch.nn.functional.pad(loss_mask[:, 1:], (0, 1))
        return plosses, acces


def apply_fsdp2(model: nn.Module) -> nn.Module:
    for module in model.draft_model.layers:
        fully_shard(module)
    fully_shard(model)
    return model


class Eagle3Trainer:
    def __init__(self, model: Eagle3Model):
        self.model = apply_fsdp2(model)

    def _forward(self, batch: dict) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        plosses, acces = self.model(
            input_ids=batch["input_ids"].cuda(),
            target_p=batch["target_p"].cuda(),
            loss_mask=batch["loss_mask"].cuda(),
            hidden_states=batch["hidden_states"].cuda(),
        )
        return plosses, acces

    def _backward(self, plosses: List[torch.Tensor], accumulation_steps: int = 1) -> torch.Tensor:
        ploss_weight = [0.8 ** i for i in range(len(plosses))]
        ploss = sum(ploss_weight[i] * plosses[i] for i in range(len(plosses))) / accumulation_steps
        # FSDP2 reduce-scatters each parameter's gradient in its post-backward hook
        ploss.backward()
        return ploss

    def train_step(self, batch: dict, optimizer) -> torch.Tensor:
        plosses, _ = self._forward(batch)
        ploss = self._backward(plosses)
        optimizer.step()
        optimizer.zero_grad()
        return ploss
