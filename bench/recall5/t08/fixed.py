# Excerpt in the shape of deepspeedai/DeepSpeedExamples
# applications/DeepSpeed-Chat/training/step3_rlhf_finetuning/ppo_trainer.py after the fix
# 811683a4e99c424326b38f91857456401c04161c (PR #636), together with the code it drives:
# Hugging Face transformers (2023) `generate` / `greedy_search` and the DeepSpeed ZeRO-3 forward pre-hook.
# Unrelated code dropped.
import torch
import torch.distributed as dist

import deepspeed.comm as ds_dist
from transformers.deepspeed import is_deepspeed_zero3_enabled


# ---- DeepSpeed-Chat training/step3_rlhf_finetuning/ppo_trainer.py ----
class DeepSpeedPPOTrainer():
    def __init__(self, rlhf_engine, args):
        self.rlhf_engine = rlhf_engine
        self.actor_model = self.rlhf_engine.actor
        self.ref_model = self.rlhf_engine.ref
        self.tokenizer = self.rlhf_engine.tokenizer
        self.max_answer_seq_len = args.max_answer_seq_len
        self.z3_enabled = args.actor_zero_stage == 3

    def _generate_sequence(self, prompts, mask):
        max_min_length = self.max_answer_seq_len + prompts.shape[1]
        with torch.no_grad():
            seq = self.actor_model.module.generate(
                prompts,
                attention_mask=mask,
                max_length=max_min_length,
                pad_token_id=self.tokenizer.pad_token_id,
                synced_gpus=self.z3_enabled)
        return seq

    def generate_experience(self, prompts, mask):
        seq = self._generate_sequence(prompts, mask)
        attention_mask = seq.not_equal(self.tokenizer.pad_token_id).long()
        with torch.no_grad():
            output = self.actor_model(seq, attention_mask=attention_mask)
            output_ref = self.ref_model(seq, attention_mask=attention_mask)
        return {"logits": output.logits, "logits_ref": output_ref.logits}


# ---- transformers/generation/utils.py (GenerationMixin, mid-2023, simplified) ----
class GenerationMixin:
    def generate(self, inputs=None, generation_config=None, synced_gpus=None, **kwargs):
        if synced_gpus is None:
            if is_deepspeed_zero3_enabled() and dist.get_world_size() > 1:
                synced_gpus = True
            else:
                synced_gpus = False
        return self.greedy_search(inputs, synced_gpus=synced_gpus, **kwargs)

    def greedy_search(self, input_ids, stopping_criteria=None, eos_token_id=None, synced_gpus=False, **model_kwargs):
        unfinished_sequences = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
        this_peer_finished = False  # used by synced_gpus only
        while True:
            if synced_gpus:
                this_peer_finished_flag = torch.tensor(0.0 if this_peer_finished else 1.0).to(input_ids.device)
                dist.all_reduce(this_peer_finished_flag, op=dist.ReduceOp.SUM)
                if this_peer_finished_flag.item() == 0.0:
                    break

            model_inputs = self.prepare_inputs_for_generation(input_ids, **model_kwargs)
            outputs = self(**model_inputs, return_dict=True)

            if synced_gpus and this_peer_finished:
                continue  # don't waste resources running the code we don't need

            next_tokens = torch.argmax(outputs.logits[:, -1, :], dim=-1)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            unfinished_sequences = unfinished_sequences.mul((next_tokens != eos_token_id).long())
            if unfinished_sequences.max() == 0:
                this_peer_finished = True
            if stopping_criteria(input_ids, None):
                this_peer_finished = True

            if this_peer_finished and not synced_gpus:
                break
        return input_ids


# ---- deepspeed/runtime/zero/parameter_offload.py + partitioned_param_coordinator.py (simplified) ----
class DeepSpeedZeRoOffload:
    def _register_hooks_recursively(self, module):
        def _pre_forward_module_hook(module, *args):
            self.pre_sub_module_forward_function(module)

        module.register_forward_pre_hook(_pre_forward_module_hook)

    def pre_sub_module_forward_function(self, sub_module):
        param_coordinator = self.get_param_coordinator(training=sub_module.training)
        param_coordinator.fetch_sub_module(sub_module, forward=True)


class PartitionedParameterCoordinator:
    def fetch_sub_module(self, current_submodule, forward: bool) -> None:
        params_to_fetch = set(current_submodule.parameters(recurse=False))
        self.__all_gather_params(params_to_fetch, forward)

    def __all_gather_params(self, params, forward: bool) -> None:
        for param in params:
            # partition_parameters._dist_allgather_fn -> dist.allgather_fn (all_gather_into_tensor)
            ds_dist.allgather_fn(param.ds_full_buffer, param.ds_tensor, group=param.ds_process_group, async_op=True)
