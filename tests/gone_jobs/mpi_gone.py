"""A 4-rank mpi4py job where ranks leave while others wait (the GONE tests).

Run under ``mpiexec -disable-auto-cleanup -n 4`` (a launcher that does not abort the
job when one rank fails). Scenario in argv[1]:

- ``raise``: rank 0 builds the initial state and raises before ``comm.Barrier()``;
  ranks 1-3 wait in the Barrier for ever.
- ``bcast``: only rank 0 takes a final ``comm.bcast``; ranks 1-3 return and exit
  normally; rank 0 waits in the bcast for ever.
- ``exit3``: rank 2 calls ``sys.exit(3)`` early; the others wait in ``comm.Barrier()``.
- ``segv``: rank 1 dereferences a NULL pointer (ctypes); the others wait in ``comm.Barrier()``.
- ``kill``: rank 3 SIGKILLs itself; the others wait in ``comm.Barrier()``.
- ``osexit``: rank 3 computes (a Python loop: moving, so no stall is seen before it
  leaves), then leaves by ``os._exit(0)`` (no exit record, no ``MPI_Finalize``); the
  others wait in ``comm.Barrier()``. Just before, it writes the epoch time into
  ``left_at`` in its working directory. (Hydra tears the whole job down when a rank is
  killed by a signal, so under ``mpiexec`` a SIGKILL is not a hang; ``os._exit`` is.)
"""
import ctypes
import os
import signal
import sys
import time

from mpi4py import MPI


def build_state(rank):
    if rank == 0:
        raise RuntimeError("initial state: shard file missing")  # GONE raise: here
    return {}


def finish(comm, rank):
    if rank == 0:
        # 4 MiB: past the eager limit, so the root waits for receivers that never come
        comm.bcast("x" * (4 << 20), root=0)  # GONE bcast: rank 0 waits here


def compute(seconds):
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x = (x * 31 + 7) % 1000003
    return x


def main():
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    scenario = sys.argv[1]
    leaving = {"raise": [0], "bcast": [1, 2, 3], "exit3": [2], "segv": [1], "kill": [3], "osexit": [3]}[scenario]
    # the others are waiting already when the leaving ranks go (the monitor sees them settle)
    if scenario == "osexit" and rank == 3:
        compute(5.0)
    else:
        time.sleep(5.0 if rank in leaving else 0.5)
    if scenario == "raise":
        build_state(rank)
    elif scenario == "exit3" and rank == 2:
        sys.exit(3)  # GONE exit3: here
    elif scenario == "segv" and rank == 1:
        ctypes.string_at(0)  # GONE segv: here
    elif scenario == "kill" and rank == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # GONE kill: here
    elif scenario == "osexit" and rank == 3:
        with open("left_at", "w") as f:
            f.write("%.3f\n" % time.time())
        os._exit(0)  # GONE osexit: here
    if scenario == "bcast":
        finish(comm, rank)
        return
    comm.Barrier()  # GONE wait: the others wait here


if __name__ == "__main__":
    main()
