# Look-alike of https://github.com/facebookresearch/fairscale/blob/v0.4.13/benchmarks/oss.py#L45
# (a false alarm of the measured projects): the model comes from torchvision, or from timm when
# torchvision lacks the name. Which packages and names are installed is the same on every rank,
# so every rank takes the same side; the wrapper's loop over the buffers runs alike.
# expect: none
import importlib

import torch
import torch.distributed as dist


class BufferSync(torch.nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module
        for buffer in self.module.buffers(recurse=True):
            dist.broadcast(buffer, 0)


def build(model_name):
    try:
        model = getattr(importlib.import_module("torchvision.models"), model_name)(pretrained=False)
    except AttributeError:
        model = getattr(importlib.import_module("timm.models"), model_name)(pretrained=False)
    return BufferSync(model)
