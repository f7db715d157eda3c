# Source: https://github.com/huggingface/transformers/pull/29980 (fix: every process computes the embeddings, the saving process writes)
# settings: collectives=prompt_encoder
# settings: rank_sources=should_save
# expect: none
import torch


class PromptModel:
    def __init__(self, prompt_encoder, num_virtual_tokens):
        self.prompt_encoder = prompt_encoder
        self.num_virtual_tokens = num_virtual_tokens

    def get_prompt_embedding_to_save(self):
        prompt_tokens = torch.arange(self.num_virtual_tokens).unsqueeze(0)
        return self.prompt_encoder(prompt_tokens)[0].detach().cpu()


class Trainer:
    def __init__(self, args, model):
        self.args = args
        self.model = PromptModel(model.prompt_encoder, args.num_virtual_tokens)

    def save_model(self, output_dir):
        embeddings = self.model.get_prompt_embedding_to_save()
        if self.args.should_save:
            torch.save({"prompt_embeddings": embeddings}, output_dir + "/adapter.bin")
