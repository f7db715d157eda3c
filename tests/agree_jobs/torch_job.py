"""A real 4-rank gloo job for the ranks_agree / @collective tests.

Launched once per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set
(env:// rendezvous on 127.0.0.1); the watchdog is armed by the job
environment (sitecustomize), not by this program. Scenario in argv[1]:

- ``disagree``: ranks 0-1 and 2-3 reach the same ranks_agree line through
  different branches; also a sub-group [1, 2, 3]. Prints ``RESULT <json>``.
- ``hang``: rank 2 never arrives at ranks_agree (it waits for data forever);
  the others wait inside ranks_agree. Never returns.
- ``blocked``: ranks 0, 2, 3 enter the decorated ``sync_grads()`` and block
  in all_reduce (in C); rank 1 skips it and blocks in barrier. Never returns.
"""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from hpc_hangkit import collective, ranks_agree
from hpc_hangkit.arm.agree import RanksDisagree


def load_batch(rank):
    if rank < 2:
        branch = "cached batch"  # ranks 0-1
    else:
        branch = "recomputed batch"  # ranks 2-3
    return branch


def wait_for_data():
    time.sleep(3600)  # rank 2 never arrives at ranks_agree


@collective
def sync_grads(t):
    dist.all_reduce(t)
    return t


@collective
def log_metrics():
    dist.barrier()


def main():
    scenario = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    result = {"rank": rank}
    if scenario == "disagree":
        ranks_agree("start")  # all agree: returns
        sub = dist.new_group([1, 2, 3])
        branch = load_batch(rank)
        try:
            ranks_agree(branch)  # the same line, reached through different branches
        except RanksDisagree as e:
            result["world"] = {"message": str(e), "groups": e.groups}
        try:
            ranks_agree(branch, group=sub)
            result["sub"] = "returned"
        except RanksDisagree as e:
            result["sub"] = {"message": str(e), "groups": e.groups}
        print("RESULT " + json.dumps(result), flush=True)
        dist.destroy_process_group()
    elif scenario == "hang":
        ranks_agree("start")
        if rank == 2:
            wait_for_data()
        print("rank %d waiting in ranks_agree" % rank, flush=True)
        ranks_agree("after load")
    elif scenario == "blocked":
        ranks_agree("start")
        t = torch.ones(4)
        for step in range(3):
            sync_grads(t)  # all ranks, three times: seq advances together
        if rank == 1:
            log_metrics()
        else:
            sync_grads(t)
    else:
        raise SystemExit("unknown scenario %r" % scenario)


if __name__ == "__main__":
    main()
