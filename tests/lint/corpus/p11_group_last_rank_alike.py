# Look-alike of https://github.com/NVIDIA/Megatron-LM/blob/core_v0.12.0/megatron/core/distributed/finalize_model_grads.py#L321
# (a false alarm of the blind check on megatron-core 0.12.0, the PyPI sdist): the last rank of
# each pipeline group is the broadcast's source, the same number on every member of the group;
# every member runs the loop once per group.
# expect: none
import torch.distributed as dist

_PP_GROUP = None
_PP_GLOBAL_RANKS = None


def get_pipeline_model_parallel_group():
    return _PP_GROUP


def get_pipeline_model_parallel_last_rank():
    return _PP_GLOBAL_RANKS[-1]


def finalize_model_grads(num_tokens):
    if num_tokens is not None:
        last_rank = get_pipeline_model_parallel_last_rank()
        pp_group = get_pipeline_model_parallel_group()
        if not isinstance(last_rank, list):
            last_rank = [last_rank]
            pp_group = [pp_group]
        for lr, group in zip(last_rank, pp_group):
            dist.broadcast(num_tokens, src=lr, group=group)
