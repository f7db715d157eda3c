"""A 4-rank gloo job where one rank leaves while the others wait in a barrier (the GONE tests).

Launched once per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (env:// on
127.0.0.1); the watchdog is armed by the job environment. Scenario in argv[1]:

- ``raise``: rank 0 raises before ``dist.barrier()``;
- ``segv``: rank 1 dereferences a NULL pointer (ctypes) before the barrier;
- ``kill``: rank 3 SIGKILLs itself before the barrier.

The ranks left waiting get gloo's "connection closed by peer" or a timeout (victims).
"""
import ctypes
import datetime
import os
import signal
import sys
import time

import torch.distributed as dist


def build_state(rank):
    if rank == 0:
        raise RuntimeError("initial state: shard file missing")  # GONE raise: here


def main():
    scenario = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    dist.barrier()
    time.sleep(2.5)  # a few watchdog dumps of every rank first
    if scenario == "raise":
        build_state(rank)
    elif scenario == "segv" and rank == 1:
        ctypes.string_at(0)  # GONE segv: here
    elif scenario == "kill" and rank == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # GONE kill: here
    dist.barrier()  # GONE wait: the others wait here


if __name__ == "__main__":
    main()
