"""Shared set-up of the Flight Recorder scenario jobs: 4 gloo ranks, env:// rendezvous on 127.0.0.1.

The launcher (tests/test_flightrec_scenarios.py) sets RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and HANGKIT_*; each scenario prints ``step <n>`` lines and then hangs.
"""
import os
import sys

import torch
import torch.distributed as dist


def init():
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def say(*a):
    print("rank %s:" % os.environ.get("RANK"), *a, flush=True)
    sys.stdout.flush()


def warmup(n=3):
    t = torch.ones(1024)
    for _ in range(n):
        dist.all_reduce(t)


def linger(err):
    """gloo raised instead of hanging: report it and keep the process alive (as a harness that
    catches the error and waits for teardown would), so its Flight Recorder can still be dumped."""
    import time
    say("collective raised:", str(err).splitlines()[0][:300])
    while True:
        time.sleep(60)


def world_step():
    t = torch.ones(1024)
    dist.all_reduce(t)  # WORLD_LINE
