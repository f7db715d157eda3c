# Look-alike of https://github.com/NVIDIA/Megatron-LM/blob/core_v0.12.0/megatron/core/models/common/language_module/language_module.py#L162
# (a false alarm of the blind check on megatron-core 0.12.0, the PyPI sdist): only the members
# of the embedding group (the first and last pipeline stages) all-reduce on that group; the
# other ranks are not in it and skip it by design.
# expect: none
import torch.distributed as dist

_EMBEDDING_GROUP = None
_EMBEDDING_RANKS = None


def get_embedding_group():
    return _EMBEDDING_GROUP


def is_rank_in_embedding_group():
    return dist.get_rank() in _EMBEDDING_RANKS


class LanguageModule:
    def shared_embedding_or_output_weight(self):
        return self.weight

    def setup_embeddings_and_output_layer(self):
        if dist.is_initialized():
            if is_rank_in_embedding_group():
                weight = self.shared_embedding_or_output_weight()
                dist.all_reduce(weight.data, group=get_embedding_group())
