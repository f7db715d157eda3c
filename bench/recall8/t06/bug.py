# Repository: https://github.com/hpcaitech/ColossalAI
# Commit (before fix): 6ae8ed04070c2654b5b4d1aaab7efb42aaa2b030
# Files excerpted: applications/ChatGPT/chatgpt/models/generation.py (sample),
#                  applications/ChatGPT/examples/train_prompts.py (tokenize_fn),
#   and the collective that every forward of a Gemini-wrapped model performs:
#                  colossalai/nn/parallel/data_parallel.py (ZeroDDP.forward),
#                  colossalai/zero/utils/gemini_hook.py (GeminiZeROHook.pre_op),
#                  colossalai/gemini/chunk/manager.py (ChunkManager.access_chunk),
#                  colossalai/gemini/chunk/chunk.py (Chunk.access_chunk, Chunk.__gather)  -- all trimmed
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.nn as nn


# ---- colossalai/gemini/chunk/chunk.py ----
class Chunk:
    def access_chunk(self):
        """Make the chunk usable for the parameters inside it. It's an operation done in CUDA."""
        assert self.chunk_temp is None
        if not self.is_gathered:
            self.__gather()
        self.__update_tensors_ptr()

    def __gather(self):
        if not self.is_gathered:
            gather_list = list(torch.chunk(input=self.cuda_global_chunk, chunks=self.pg_size, dim=0))
            dist.all_gather(gather_list, self.cuda_shard, self.torch_pg)
            self.cuda_shard = None
            self.is_gathered = True


# ---- colossalai/gemini/chunk/manager.py ----
class ChunkManager:
    def access_chunk(self, chunk: Chunk) -> None:
        if chunk in self.accessed_chunks:
            return
        self.__add_accessed_chunk(chunk)

    def __add_accessed_chunk(self, chunk: Chunk):
        chunk.access_chunk()
        self.accessed_chunks.add(chunk)


# ---- colossalai/zero/utils/gemini_hook.py ----
class GeminiZeROHook:
    def pre_op(self, params):
        chunks = self._chunk_manager.get_chunks(params)
        for chunk in chunks:
            self._chunk_manager.access_chunk(chunk)

    def pre_forward(self, params):
        self.pre_op(params)


# ---- colossalai/nn/parallel/data_parallel.py ----
class ZeroDDP(nn.Module):
    def forward(self, *args, **kwargs):
        with ColoParamOpHookManager.use_hooks(self.param_op_hook):   # GeminiZeROHook
            outputs = self.module(*args, **kwargs)
        if not torch.is_grad_enabled():
            self._post_forward()
        return outputs


# ---- applications/ChatGPT/chatgpt/models/generation.py ----
def sample(model: nn.Module,
           input_ids: torch.Tensor,
           max_length: int,
           early_stopping: bool = False,
           eos_token_id: Optional[int] = None,
           pad_token_id: Optional[int] = None,
           top_k: Optional[int] = None,
           top_p: Optional[float] = None,
           temperature: Optional[float] = None,
           prepare_inputs_fn: Optional[Callable[[torch.Tensor, Any], dict]] = None,
           update_model_kwargs_fn: Optional[Callable[[dict, Any], dict]] = None,
           **model_kwargs) -> torch.Tensor:
    if input_ids.size(1) >= max_length:
        return input_ids

    logits_processor = prepare_logits_processor(top_k, top_p, temperature)
    unfinished_sequences = input_ids.new(input_ids.shape[0]).fill_(1)

    for _ in range(input_ids.size(1), max_length):
        model_inputs = prepare_inputs_fn(input_ids, **model_kwargs) if prepare_inputs_fn is not None else {
            'input_ids': input_ids
        }
        outputs = model(**model_inputs)

        next_token_logits = outputs['logits'][:, -1, :]
        next_token_logits = logits_processor(input_ids, next_token_logits)
        probs = torch.softmax(next_token_logits, dim=-1, dtype=torch.float)
        next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)

        # finished sentences should have their next token be a padding token
        if eos_token_id is not None:
            if pad_token_id is None:
                raise ValueError("If `eos_token_id` is defined, make sure that `pad_token_id` is defined.")
            next_tokens = next_tokens * unfinished_sequences + pad_token_id * (1 - unfinished_sequences)

        # update generated ids, model inputs for next step
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        if update_model_kwargs_fn is not None:
            model_kwargs = update_model_kwargs_fn(outputs, **model_kwargs)

        # if eos_token was found in one sentence, set sentence to finished
        if eos_token_id is not None:
            unfinished_sequences = unfinished_sequences.mul((next_tokens != eos_token_id).long())

        # stop when each sentence is finished if early_stopping=True
        if early_stopping and unfinished_sequences.max() == 0:
            break

    return input_ids


# ---- applications/ChatGPT/examples/train_prompts.py (inside main) ----
def tokenize_fn(texts):
    batch = tokenizer(texts, return_tensors='pt', max_length=96, padding=True, truncation=True)
    return {k: v.cuda() for k, v in batch.items()}
