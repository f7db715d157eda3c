# Look-alike of https://github.com/deepspeedai/DeepSpeed/pull/4536: only rank 0 creates the
# directory, then every rank meets in the barrier and saves its shard.
# expect: none
import os

import torch.distributed as dist


def save(model_engine, save_dir, tag):
    if model_engine.global_rank == 0:
        os.makedirs(save_dir, exist_ok=True)
    dist.barrier()
    model_engine.save_checkpoint(save_dir, tag=tag)
