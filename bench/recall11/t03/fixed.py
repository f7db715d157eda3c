# After the fix: hiyouga/LLaMA-Factory PR #2319 patch_mixtral_replace_moe_impl (dense MoE forward,
#   from ftgreat/llmkit mixtral_dense_moe_monkey_patch.py) applied over transformers v4.36.2
# Files excerpted: src/transformers/models/mixtral/modeling_mixtral.py
#   (MixtralBLockSparseTop2MLP.forward, MixtralSparseMoeBlock.forward), plus the
#   DeepSpeed ZeRO-3 training step that drives it (LLaMA-Factory / HF Trainer), shortened
import torch
import torch.nn as nn
import torch.nn.functional as F


class MixtralBLockSparseTop2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, hidden_states):
        # under ZeRO-3 the module pre-forward hook all-gathers w1/w2/w3 here,
        # and the backward hook reduce-scatters their gradients
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        current_hidden_states = self.w2(current_hidden_states)
        return current_hidden_states


class MixtralSparseMoeBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_dim = config.hidden_size
        self.num_experts = config.num_local_experts
        self.top_k = config.num_experts_per_tok
        self.gate = nn.Linear(self.hidden_dim, self.num_experts, bias=False)
        self.experts = nn.ModuleList(
            [MixtralBLockSparseTop2MLP(config) for _ in range(self.num_experts)])

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)

        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        topk_weight, topk_idx = torch.topk(routing_weights, self.top_k, dim=-1, sorted=False)
        topk_weight /= topk_weight.sum(dim=-1, keepdim=True)
        topk_weight = topk_weight.to(hidden_states.dtype)

        hidden_states = hidden_states.repeat_interleave(self.top_k, dim=0)
        y = torch.empty_like(hidden_states)
        flat_topk_idx = topk_idx.view(-1)
        # every expert is called on every rank (possibly on an empty slice),
        # so the ZeRO-3 gather / reduce-scatter sequence is the same everywhere
        for i in range(self.num_experts):
            expert = self.experts[i]
            y[flat_topk_idx == i] = expert(hidden_states[flat_topk_idx == i])
        y = (y.view(*topk_weight.shape, -1) * topk_weight.unsqueeze(-1)).sum(dim=1)
        final_hidden_states = y.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


def training_step(model_engine, batch):
    # DeepSpeed ZeRO-3 engine (stage 3): forward all-gathers each sub-module's
    # partitioned params on entry; backward reduce-scatters each param's grad
    outputs = model_engine(**batch)
    loss = outputs.loss
    model_engine.backward(loss)
    model_engine.step()
    return loss
