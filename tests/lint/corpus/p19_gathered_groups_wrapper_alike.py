# Look-alike of https://github.com/mosaicml/composer/blob/v0.28.0/composer/distributed/mosaic_parallelism.py#L153
# (a false alarm of the blind check on Composer 0.28.0, the mosaicml PyPI sdist): each rank
# computes its own group of ranks, but the enumeration handed to the group creation is the
# all-gathered list of every rank's group, returned by the project's own wrapper; its only
# other return (`[obj]`) stands under `if world_size == 1:`, where there are no other ranks.
# Every rank creates the same groups.
# expect: none
from typing import cast

import torch.distributed as dist


def all_gather_object(obj, group=None):
    if dist.is_available() and dist.is_initialized():
        gathered = [None for _ in range(dist.get_world_size())]
        dist.all_gather_object(gathered, obj, group=group)
        return cast(list, gathered)
    world_size = dist.get_world_size()
    if world_size == 1:
        return [obj]
    raise RuntimeError("the distributed package is not initialized")


def process_group_of(k):
    start = dist.get_rank() // k * k
    ranks = tuple(range(start, start + k))
    ranks_per_subgroup = sorted(set(all_gather_object(ranks)))
    group, _subgroups = dist.new_subgroups_by_enumeration(ranks_per_subgroup)
    return group
