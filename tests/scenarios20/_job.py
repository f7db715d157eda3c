"""What every scenario of tests/scenarios20 shares: gloo init over env://, a print helper."""
import datetime
import os

import torch.distributed as dist


def init():
    """Join the 4-rank gloo job (a long timeout: the hang must outlast the test). Returns (rank, world)."""
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=600))
    return dist.get_rank(), dist.get_world_size()


def say(*a):
    print("[rank %s]" % os.environ.get("RANK"), *a, flush=True)
