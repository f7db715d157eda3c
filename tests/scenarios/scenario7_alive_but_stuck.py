"""Scenario 7 (HANG_SCENARIOS.md): alive but stuck.

At step 5, rank 1 stops entering the all_reduce and sleeps in a uniquely
named function while its process stays healthy. Expected roll call: MISSED,
ranks 0,2,3 waiting at the train line's all_reduce, rank 1 in
``wait_for_a_condition_that_never_comes``.
"""
import datetime
import sys
import time

import torch
import torch.distributed as dist


def wait_for_a_condition_that_never_comes():
    while True:
        time.sleep(0.5)  # MARK: stuck-sleep


def train(rank):
    x = torch.ones(8)
    for step in range(50):
        if rank == 1 and step == 5:
            wait_for_a_condition_that_never_comes()
        dist.all_reduce(x)  # MARK: train-allreduce
        x /= dist.get_world_size()
        print("[rank %d] step %d" % (rank, step), flush=True)
        time.sleep(0.1)


def main():
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=900))
    train(dist.get_rank())
    return 0


if __name__ == "__main__":
    sys.exit(main())
