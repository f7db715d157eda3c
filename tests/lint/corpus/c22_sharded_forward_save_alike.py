# Look-alike of https://github.com/huggingface/transformers/pull/29980: the saving process
# writes a state dict gathered before the branch; no module forward under the branch.
# settings: collectives=prompt_encoder
# settings: rank_sources=should_save
# expect: none
import torch


class Trainer:
    def __init__(self, args, model):
        self.args = args
        self.model = model

    def save_model(self, output_dir):
        state = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        if self.args.should_save:
            torch.save(state, output_dir + "/pytorch_model.bin")
            print("saved to", output_dir)
