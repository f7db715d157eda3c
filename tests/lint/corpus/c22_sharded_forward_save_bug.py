# Source: https://github.com/huggingface/transformers/pull/29980
# Bug: with DeepSpeed ZeRO-3 and prompt tuning, save_pretrained() runs the prompt encoder's
#      forward to get the embeddings to save; the forward of a ZeRO-3 module all-gathers its
#      sharded parameters, and only the process that saves runs it.
# Class: library method that is collective (a sharded module's forward, named in the
#        settings), rank from a project attribute (args.should_save, named in the settings)
# settings: collectives=prompt_encoder
# settings: rank_sources=should_save
# expect: HK101 collective=20|33 branch=32
import torch


class PromptModel:
    def __init__(self, prompt_encoder, num_virtual_tokens):
        self.prompt_encoder = prompt_encoder
        self.num_virtual_tokens = num_virtual_tokens

    def get_prompt_embedding_to_save(self):
        prompt_tokens = torch.arange(self.num_virtual_tokens).unsqueeze(0)
        return self.prompt_encoder(prompt_tokens)[0].detach().cpu()

    def save_pretrained(self, output_dir):
        torch.save({"prompt_embeddings": self.get_prompt_embedding_to_save()}, output_dir + "/adapter.bin")


class Trainer:
    def __init__(self, args, model):
        self.args = args
        self.model = PromptModel(model.prompt_encoder, args.num_virtual_tokens)

    def save_model(self, output_dir):
        if self.args.should_save:
            self.model.save_pretrained(output_dir)
