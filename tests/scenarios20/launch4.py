"""Start the 4 ranks of one scenario as a launcher would: ``python launch4.py PORT SCRIPT [ARGS...]``.

Each rank is ``python SCRIPT ARGS`` with RANK, WORLD_SIZE=4, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and
MASTER_PORT set; the rest of the environment (the armed job's, from ``hpc-hangkit run``) is
inherited. Waits for every rank; exits with the first non-zero status (a signal as 128+N).
"""
import os
import subprocess
import sys


def main():
    port, script, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    procs = []
    for r in range(4):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="4", LOCAL_WORLD_SIZE="4",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, script] + args, env=env))
    rc = 0
    for p in procs:
        s = p.wait()
        if s and not rc:
            rc = 128 - s if s < 0 else s
    return rc


if __name__ == "__main__":
    sys.exit(main())
