# Look-alike of https://github.com/NVIDIA/Megatron-LM/blob/core_v0.12.0/megatron/core/datasets/retro/utils.py#L191
# (a false alarm of the blind check on megatron-core 0.12.0, the PyPI sdist): each rank takes
# its interleaved share of the blocks, then pads its list with None to the largest share over
# ranks (all-reduced with MAX): every rank's list has the same length, so the loop over it in
# the caller runs as often on every rank and the barrier in it is reached alike (and the list
# is empty on every rank or on none). An optional
# random sample is cut to a count computed from that common length and padded to it again.
# expect: none
from types import SimpleNamespace

import numpy as np
import torch
import torch.distributed as dist


def get_blocks_by_rank(all_blocks, sample=None):
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    rank_blocks = all_blocks[rank:len(all_blocks):world_size]

    def get_world_max(n):
        n_tensor = torch.tensor([n])
        dist.all_reduce(n_tensor, op=dist.ReduceOp.MAX)
        return n_tensor.item()

    max_n = get_world_max(len(rank_blocks))
    rank_blocks += [None] * (max_n - len(rank_blocks))
    blocks = SimpleNamespace(n_world=len(all_blocks), existing=rank_blocks)

    if sample is not None:
        def sample_blocks(_blocks):
            n_sample = int(np.ceil(sample * len(_blocks)))
            sampled = [b for b in _blocks if b is not None]
            np.random.shuffle(sampled)
            sampled = sampled[:n_sample]
            sampled += [None] * (n_sample - len(sampled))
            return sampled

        blocks.existing = sample_blocks(blocks.existing)

    return blocks


def build_all(all_blocks, work, sample=None):
    blocks = get_blocks_by_rank(all_blocks, sample)
    active_blocks = blocks.existing
    if not active_blocks:
        return
    for block_idx, block in enumerate(active_blocks):
        if block is not None:
            work(block)
        dist.barrier()
