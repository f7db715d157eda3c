"""A tiny armed rank for the N-node test cluster: stdlib only, a few MB each, no CPU once hung.

Started by ``srun`` in a job with hang detection on, it is armed at interpreter start like any
Python task (the SPANK plugin puts the boot ``sitecustomize`` first on PYTHONPATH; the rank is
``SLURM_PROCID``). It then blocks for ever in ``select`` on a pipe nobody writes to: every
rank in :func:`wait_for_peers`, except rank ``--suspect``, which blocks in
:func:`wait_for_token`, a different line. The watchdog's dumps therefore show the majority at
one line and the suspect at another, so the roll call says SPLIT with that rank suspect.

Just before blocking, each rank writes ``time.time()`` (seconds since the epoch) to
``STAMPS/<rank>``, so a bench can tell when the last rank reached its hang line.

    srun python bench/tiny_rank.py --stamps DIR [--suspect RANK]

Exits only by a signal (the job's end or scancel).
"""
import argparse
import os
import select
import time


def _stamp(stamps, rank):
    tmp = os.path.join(stamps, ".%d.tmp" % rank)
    with open(tmp, "w") as f:
        f.write("%.6f\n" % time.time())
    os.replace(tmp, os.path.join(stamps, str(rank)))


def wait_for_peers(fd, stamps, rank):
    """Where the majority hangs: waiting for data that never comes."""
    _stamp(stamps, rank)
    while True:
        select.select([fd], [], [])  # the majority's hang line


def wait_for_token(fd, stamps, rank):
    """Where the suspect hangs: a different branch, a different line."""
    _stamp(stamps, rank)
    while True:
        select.select([fd], [], [])  # the suspect's hang line


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stamps", required=True, help="directory for the per-rank hang timestamps")
    ap.add_argument("--suspect", type=int, default=1, help="the rank that hangs elsewhere (default 1)")
    a = ap.parse_args(argv)
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    r, _w = os.pipe()  # the write end stays open and silent: select never returns
    if rank == a.suspect:
        wait_for_token(r, a.stamps, rank)
    else:
        wait_for_peers(r, a.stamps, rank)


if __name__ == "__main__":
    main()
