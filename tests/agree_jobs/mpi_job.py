"""A real 4-rank mpi4py job for the ranks_agree / @collective tests.

Launched with ``mpiexec -n 4``; the watchdog is armed by the job environment
(sitecustomize), not by this program. Scenario in argv[1]:

- ``disagree``: ranks 0-1 and 2-3 reach the same ranks_agree line through
  different branches; also a sub-communicator of ranks 1, 2, 3 (Split).
  Prints ``RESULT <json>``.
- ``hang``: rank 2 never arrives at ranks_agree; the others wait inside it.
- ``blocked``: ranks 0, 2, 3 enter the decorated ``sync_grads()`` and block
  in allreduce (in C); rank 1 skips it and blocks in Barrier.
"""
import json
import sys
import time

from mpi4py import MPI

from hpc_hangkit import collective, ranks_agree
from hpc_hangkit.arm.agree import RanksDisagree

comm = MPI.COMM_WORLD


def load_batch(rank):
    if rank < 2:
        branch = "cached batch"  # ranks 0-1
    else:
        branch = "recomputed batch"  # ranks 2-3
    return branch


def wait_for_data():
    time.sleep(3600)  # rank 2 never arrives at ranks_agree


@collective
def sync_grads(x):
    return comm.allreduce(x)


@collective
def log_metrics():
    comm.Barrier()


def main():
    scenario = sys.argv[1]
    rank = comm.Get_rank()
    result = {"rank": rank}
    if scenario == "disagree":
        ranks_agree("start")  # all agree: returns
        sub = comm.Split(0 if rank >= 1 else MPI.UNDEFINED, rank)
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
    elif scenario == "hang":
        ranks_agree("start")
        if rank == 2:
            wait_for_data()
        print("rank %d waiting in ranks_agree" % rank, flush=True)
        ranks_agree("after load")
    elif scenario == "blocked":
        ranks_agree("start")
        for step in range(3):
            sync_grads(1)
        if rank == 1:
            log_metrics()
        else:
            sync_grads(1)
    else:
        raise SystemExit("unknown scenario %r" % scenario)


if __name__ == "__main__":
    main()
