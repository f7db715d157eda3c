"""A Python-level deadlock on one rank: a helper takes a lock its caller already holds.

Shape of nvidia-cosmos/cosmos-transfer2.5#240 (https://github.com/nvidia-cosmos/cosmos-transfer2.5/issues/240:
"code for wandb log may introduce a dead lock", seen as "[Rank 5] Watchdog caught collective
operation timeout" on the other ranks): here rank 1 logs its metrics at step 3 under the
metrics lock, and the logging helper takes the same (non-reentrant) lock again; ranks 0,2,3 wait
at the next all_reduce for it.
"""
import threading
import time

import torch
import torch.distributed as dist

from _job import init, say

_metrics_lock = threading.Lock()


def flush_metrics():
    with _metrics_lock:  # LOCK_LINE
        pass


def log_metrics(step):
    with _metrics_lock:
        flush_metrics()


def train(rank):
    for step in range(1, 8):
        if rank == 1 and step == 3:  # BRANCH_LINE
            log_metrics(step)
        grad = torch.ones(16)
        dist.all_reduce(grad)  # TRAIN_LINE
        say("step", step)
        time.sleep(0.05)


def main():
    rank, _ = init()
    train(rank)
    say("done")


if __name__ == "__main__":
    main()
