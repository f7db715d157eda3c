# Look-alike of https://github.com/deepspeedai/DeepSpeed/blob/v0.16.2/deepspeed/runtime/bf16_optimizer.py#L290
# (a false alarm of the measured projects): the clipping threshold is saved under CLIP_GRAD
# from self.clip_grad and restored from this rank's entry of the checkpoint list; what comes
# back is what a rank saved from the same setting, the same on every rank, so every rank
# takes the clipping branch and its all_reduce alike.
# expect: none
import torch
import torch.distributed as dist

CLIP_GRAD = "clip_grad"


class Optimizer:
    def __init__(self, params, clip_grad=0.0):
        self.params = params
        self.clip_grad = clip_grad

    def state_dict(self):
        state = {}
        state[CLIP_GRAD] = self.clip_grad
        return state

    def load_state_dicts(self, state_dict_list):
        rank = dist.get_rank()
        mine = state_dict_list[rank]
        self.clip_grad = mine.get(CLIP_GRAD, self.clip_grad)

    def step(self):
        if self.clip_grad > 0.0:
            norm = torch.stack([p.grad.norm() for p in self.params]).norm()
            dist.all_reduce(norm)
            for p in self.params:
                p.grad.mul_(self.clip_grad / (norm + 1e-6))
