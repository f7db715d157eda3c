# Look-alike of https://github.com/NVIDIA/Megatron-LM/blob/core_v0.12.0/megatron/core/inference/text_generation_controllers/text_generation_controller.py#L42
# (a false alarm of the blind check on megatron-core 0.12.0, the PyPI sdist): a rank is both
# the first and the last pipeline stage only when the pipeline has one stage, so
# `not (first and last)` says whether the model is pipeline-parallel: the same on every rank,
# and every rank takes the broadcast or none does.
# expect: none
import torch
import torch.distributed as dist

_PIPELINE_GROUP = None


def get_pipeline_model_parallel_rank():
    return dist.get_rank(group=_PIPELINE_GROUP)


def get_pipeline_model_parallel_world_size():
    return dist.get_world_size(group=_PIPELINE_GROUP)


def is_pipeline_first_stage():
    return get_pipeline_model_parallel_rank() == 0


def is_pipeline_last_stage():
    return get_pipeline_model_parallel_rank() == get_pipeline_model_parallel_world_size() - 1


def broadcast_from_last_pipeline_stage(shape, tensor=None):
    if tensor is None:
        tensor = torch.empty(shape)
    dist.broadcast(tensor, get_pipeline_model_parallel_world_size() - 1, group=_PIPELINE_GROUP)
    return tensor


class Controller:
    def __init__(self, model):
        self.model = model
        # without pipeline parallelism a rank is both the first and the last stage
        self.model_is_pipeline_parallel = not (is_pipeline_first_stage() and is_pipeline_last_stage())

    def step(self, tokens):
        logits = self.model(tokens) if is_pipeline_last_stage() else None
        if self.model_is_pipeline_parallel:
            logits = broadcast_from_last_pipeline_stage([len(tokens), 8], tensor=logits)
        return logits
