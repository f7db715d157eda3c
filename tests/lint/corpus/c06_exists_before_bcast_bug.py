# Source: https://github.com/KempnerInstitute/KempnerForge/pull/50
# Bug: every rank checks train_state_path.exists() on its own file system view (NFS/Lustre
#      attribute caching); a rank that sees no file skips broadcast_object_list, the others wait.
# Class: rank-local condition (file check) before a collective
# expect: HK201 collective=18 branch=15
from pathlib import Path

import torch
import torch.distributed as dist


def load_train_state(ckpt_dir):
    train_state_path = Path(ckpt_dir) / "train_state.pt"
    state = [None]
    if train_state_path.exists():
        if dist.get_rank() == 0:
            state[0] = torch.load(train_state_path, weights_only=False)
        dist.broadcast_object_list(state, src=0)
    return state[0]
