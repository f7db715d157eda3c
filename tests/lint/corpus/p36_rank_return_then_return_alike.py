# Look-alike of https://github.com/volcengine/verl/blob/v0.9.1/verl/checkpoint_engine/delta_sync/sparse_gather.py#L121
# (a false alarm of the blind check on verl 0.9.1): inside a branch every rank takes alike (the
# largest all-gathered count is 0), the ranks other than 0 return None and rank 0 returns an
# empty result right after: every rank leaves there, so the gathers below are reached by all
# ranks or by none. (The two sides of a rank test, each followed by the rest of its block, are
# compared as the collectives they reach in order and how they leave; one way through each, the
# same: nothing to report.)
# expect: none
import torch
import torch.distributed as dist


def gather_to_rank0(idx, counts, group=None):
    rank = dist.get_rank(group)
    world = dist.get_world_size(group)
    counts_all = [torch.zeros_like(counts) for _ in range(world)]
    dist.all_gather(counts_all, counts, group=group)
    totals = [int(c.sum()) for c in counts_all]
    max_n = max(totals) if totals else 0
    if max_n == 0:
        if rank != 0:
            return None
        empty = torch.empty(0, dtype=idx.dtype)
        return [empty for _ in range(world)]
    pad = torch.zeros(max_n, dtype=idx.dtype)
    pad[: idx.numel()] = idx
    out = [torch.zeros(max_n, dtype=idx.dtype) for _ in range(world)] if rank == 0 else None
    dist.gather(pad, out, dst=0, group=group)
    if rank != 0:
        return None
    return [o[: totals[r]] for r, o in enumerate(out)]
