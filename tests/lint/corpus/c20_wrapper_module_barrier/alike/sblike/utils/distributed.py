import os

import torch


def if_main_process():
    return int(os.environ.get("RANK", "0")) == 0


def ddp_barrier():
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
