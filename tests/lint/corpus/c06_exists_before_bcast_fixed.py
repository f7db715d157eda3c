# Source: https://github.com/KempnerInstitute/KempnerForge/pull/50 (rank 0 decides, the flag is broadcast)
# expect: none
from pathlib import Path

import torch
import torch.distributed as dist


def load_train_state(ckpt_dir):
    train_state_path = Path(ckpt_dir) / "train_state.pt"
    flag = torch.tensor([int(train_state_path.exists()) if dist.get_rank() == 0 else 0])
    dist.broadcast(flag, src=0)
    state = [None]
    if flag.item():
        if dist.get_rank() == 0:
            state[0] = torch.load(train_state_path, weights_only=False)
        dist.broadcast_object_list(state, src=0)
    return state[0]
