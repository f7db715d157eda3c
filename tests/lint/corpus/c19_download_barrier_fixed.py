# Source: https://github.com/huggingface/transformers-bloom-inference/pull/40 (fix: the barrier after the branch)
# expect: none
import os

import torch.distributed as dist
from huggingface_hub import snapshot_download


def get_checkpoint_files(model_name_or_path):
    local_rank = int(os.getenv("LOCAL_RANK", "0"))
    if local_rank == 0:
        snapshot_download(model_name_or_path, allow_patterns=["*"], local_files_only=False)
    dist.barrier()
    cached = snapshot_download(model_name_or_path, local_files_only=True)
    return [os.path.join(cached, f) for f in os.listdir(cached) if f.endswith(".bin")]
