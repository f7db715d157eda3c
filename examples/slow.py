"""A slow but healthy 4-rank job: rank 0 does seconds of real file I/O while the others wait.

It must never be confirmed as a hang: the other ranks sit in a collective and
disagree with rank 0 for longer than the confirm window, but rank 0 is moving
(its stack changes between watchdog dumps), so the roll call says SLOW.

    hpc-hangkit run --confirm-duration 6 --poll-interval 1 -- \
        mpiexec -n 4 python examples/slow.py --mpi
    hpc-hangkit run --confirm-duration 6 --poll-interval 1 -- \
        python -m torch.distributed.run --nproc-per-node 4 examples/slow.py

(--confirm-duration must be longer than --poll-interval, whose default is 15 s.)

Rank 0 writes, fsyncs, re-reads and hashes a scratch file in chunks (like
saving a checkpoint) for ``--io-seconds`` seconds, then joins the others.
"""
import argparse
import hashlib
import os
import tempfile
import time

from healthy import make_comm  # same directory: the comm shim of the healthy example


def write_chunk(f, n):
    data = os.urandom(n)
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
    return data


def reread(path, h):
    with open(path, "rb") as f:
        while True:
            buf = f.read(1 << 20)
            if not buf:
                break
            h.update(buf)


def save_checkpoint(seconds, chunk):
    """Real file I/O for about ``seconds`` seconds; returns (bytes written, sha256)."""
    fd, path = tempfile.mkstemp(prefix="hangkit-slow-")
    written = 0
    h = hashlib.sha256()
    t_end = time.time() + seconds
    try:
        with os.fdopen(fd, "wb") as f:
            while time.time() < t_end:
                written += len(write_chunk(f, chunk))
                if written >= 64 * chunk:  # keep the file bounded: start over
                    reread(path, h)
                    f.seek(0)
                    f.truncate()
                    written = 0
        reread(path, h)
    finally:
        os.unlink(path)
    return written, h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", action="store_true")
    ap.add_argument("--io-seconds", type=float, default=12.0)
    ap.add_argument("--chunk", type=int, default=1 << 19)
    args = ap.parse_args()
    rank, world, allreduce, barrier, finish = make_comm(args.mpi)
    allreduce(1.0)
    if rank == 0:
        save_checkpoint(args.io_seconds, args.chunk)
    total = allreduce(float(rank))  # ranks 1..3 wait here while rank 0 writes
    barrier()
    print("rank %d done (%g)" % (rank, total), flush=True)
    finish()


if __name__ == "__main__":
    main()
