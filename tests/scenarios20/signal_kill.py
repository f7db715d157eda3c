"""A rank killed by a signal inside a rank-dependent block.

Shape of facebookresearch/fairseq#3509 (https://github.com/facebookresearch/fairseq/issues/3509,
"Fighting deadlocks": "when one worker OOMs or dies ..., others hang on distributed
communication") and ai2cm/ace#1068 (https://github.com/ai2cm/ace/pull/1068: a rank ended by a
signal leaves its siblings "to hang on the next collective operation"): rank 3 builds a cache
only it keeps (a rank-dependent block), grows, and is SIGKILLed as the OOM killer would; it
leaves no traceback and no exit record of its own. gloo fails the all_reduce of its ring
neighbours, ranks 0 and 2 (the connection closed); like a fault-tolerant trainer they catch the
error and wait for the job controller to restart them. Rank 1 exchanges data with ranks 0 and 2
only, so its all_reduce waits on.
"""
import os
import signal
import time

import torch
import torch.distributed as dist

from _job import init, say


def build_cache(rank):
    cache = []
    for _ in range(40):
        cache.append(torch.zeros(1024))
        time.sleep(0.1)  # GROW_LINE
    os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer's signal


def wait_for_restart():
    while True:
        time.sleep(0.2)  # RESTART_LINE


def train(rank):
    for step in range(1, 8):
        if rank == 3 and step == 3:  # BRANCH_LINE
            build_cache(rank)
        grad = torch.ones(16)
        try:
            dist.all_reduce(grad)  # TRAIN_LINE
        except RuntimeError as e:  # a peer is gone
            say("collective failed:", str(e)[:80])
            wait_for_restart()
        say("step", step)
        time.sleep(0.05)


def main():
    rank, _ = init()
    train(rank)
    say("done")


if __name__ == "__main__":
    main()
