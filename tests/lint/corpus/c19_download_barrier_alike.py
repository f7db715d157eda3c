# Look-alike of https://github.com/huggingface/transformers-bloom-inference/pull/40: rank 0
# downloads, the others wait in a barrier in the else branch and rank 0 joins it after the
# download (every rank calls barrier exactly once).
# expect: none
import os

import torch.distributed as dist
from huggingface_hub import snapshot_download


def get_checkpoint_files(model_name_or_path):
    local_rank = int(os.getenv("LOCAL_RANK", "0"))
    if local_rank == 0:
        snapshot_download(model_name_or_path, allow_patterns=["*"], local_files_only=False)
        dist.barrier()
    else:
        dist.barrier()
    cached = snapshot_download(model_name_or_path, local_files_only=True)
    return sorted(os.listdir(cached))
