"""One armed rank of a 2-rank job with no collective library (the vanished-pid tests).

Launched once per rank with RANK and WORLD_SIZE; the watchdog is armed by the job
environment. argv[1]:

- ``wait``: blocks for ever on an event nobody sets (as a rank waiting for a peer does);
- ``compute``: a Python loop for ever, with a ``checkpoint()`` every few thousand steps
  (moving, whatever the load on the machine), until the test SIGKILLs it.
"""
import sys
import threading

from hpc_hangkit.arm.watchdog import checkpoint


def compute():
    x = 0
    while True:
        for _ in range(5000):
            x = (x * 31 + 7) % 1000003  # VANISH compute: here
        checkpoint("compute")


def main():
    if sys.argv[1] == "wait":
        threading.Event().wait()  # VANISH wait: here
    else:
        compute()


if __name__ == "__main__":
    main()
