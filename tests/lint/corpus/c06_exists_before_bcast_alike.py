# Look-alike of https://github.com/KempnerInstitute/KempnerForge/pull/50: an exists() check that
# only decides local work (read a per-rank cache file); the collective is outside the branch.
# expect: none
from pathlib import Path

import torch
import torch.distributed as dist


def load_rank_cache(ckpt_dir, metrics):
    path = Path(ckpt_dir) / ("cache_rank%d.pt" % dist.get_rank())
    cache = {}
    if path.exists():
        cache = torch.load(path)
    dist.all_reduce(metrics)
    return cache, metrics
