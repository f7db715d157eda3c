# Look-alike of https://github.com/huggingface/trl/blob/v1.16.0/trl/trainer/grpo_trainer.py#L2281
# (a false alarm of the blind check on trl 1.16.0): every rank all-gathers its completion
# lengths with `self.accelerator.gather` (accelerate's gather is an all-gather: every rank holds
# the same concatenation), then raises when the gathered tensor is empty: its size is the same
# on every rank, so every rank raises or none does before the next gather.
# expect: none
import torch
from accelerate import Accelerator


class Trainer:
    def __init__(self):
        self.accelerator = Accelerator()
        self.tools = []
        self.metrics = {}

    def log_completions(self, prompt_ids, completion_ids, tool_call_count):
        device = self.accelerator.device
        prompt_lengths = torch.tensor([len(ids) for ids in prompt_ids], device=device)
        completion_lengths = torch.tensor([len(ids) for ids in completion_ids], device=device)
        agg_prompt_lengths = self.accelerator.gather(prompt_lengths)
        agg_completion_lengths = self.accelerator.gather(completion_lengths)
        if agg_completion_lengths.numel() == 0:
            raise RuntimeError("No completions were generated.")
        self.metrics["num_tokens"] = (agg_prompt_lengths.sum() + agg_completion_lengths.sum()).item()
        self.metrics["mean_length"] = agg_completion_lengths.float().mean().item()
        if self.tools:
            agg_tool_call_count = self.accelerator.gather(torch.tensor(tool_call_count, device=device)).sum()
            self.metrics["tool_call_frequency"] = (agg_tool_call_count / len(agg_prompt_lengths)).item()
