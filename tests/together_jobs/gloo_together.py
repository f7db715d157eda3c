"""4-rank (or 2-rank) gloo jobs where every rank sits in the same distributed call (TOGETHER).

Launched by torchrun (``--nproc-per-node N``); a plain user script. Scenario in argv[1]:

- ``frozen``: every rank enters ``dist.barrier()`` at one line, but rank 3 on another
  process group of the same four ranks: each side waits for the other, for ever, with
  nothing moving (a rank-symmetric stall, as when a NIC or GPU stops answering).
- ``long``: every rank runs big ``all_reduce`` calls at one line for ``argv[2]`` seconds
  (long collectives that complete; their traffic is progress), then exits 0.
- ``sleeping``: every rank sleeps ``argv[2]`` seconds outside any distributed call, then exits 0.
- ``sendsend``: 2 ranks each ``dist.send`` a large tensor to the other before ``dist.recv``:
  a point-to-point ordering deadlock.
"""
import sys
import time

import torch
import torch.distributed as dist


def main():
    scenario = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if scenario == "sleeping":
        time.sleep(float(sys.argv[2]))  # TOGETHER sleeping: every rank here
        return
    if scenario == "sendsend":
        peer = 1 - rank
        t = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB: more than the sockets buffer
        dist.send(t, dst=peer)  # TOGETHER sendsend: both ranks wait here
        dist.recv(t, src=peer)
        return
    if scenario == "long":
        t = torch.ones(16 << 20)
        stop = torch.zeros(1)
        end = time.monotonic() + float(sys.argv[2])
        while not stop.item():
            dist.all_reduce(t)  # TOGETHER long: every rank here, moving
            # every rank leaves after the same call (each reading its own clock, one rank
            # could stop a call early and leave the others' last all_reduce without a peer)
            stop.fill_(float(time.monotonic() >= end))
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        return
    a, b = dist.new_group([0, 1, 2, 3]), dist.new_group([0, 1, 2, 3])
    dist.barrier(group=b if rank == 3 else a)  # TOGETHER barrier: every rank waits here


if __name__ == "__main__":
    main()
