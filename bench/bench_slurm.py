"""Slurm-side overheads of hpc-hangkit on the test cluster (prints figures, asserts nothing).

Run as root with the test cluster up (bash slurm/testbed/up.sh):

    python bench/bench_slurm.py [--runs 5]

Prints, in seconds (median of --runs):
- up.sh on a running cluster (the idempotent no-op);
- the prolog alone (one node, one job: Python start + Settings.to_env + scratch);
- `srun -N2 -n8 true` as hkuser with --hang-detect=off vs observe (the SPANK
  plugin's per-task work is reading hangkit.env in C; the prolog runs per node);
- one `srun --overlap` probe of the other node from inside a running job
  (what the batch-step monitor pays per poll while nothing moves on its node).
"""
import argparse
import os
import statistics
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HK_ROOT = os.environ.get("HK_ROOT", "/var/tmp/hk-slurm")
WORK = os.path.join(HK_ROOT, "work")


def timed(argv, **kw):
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - t


def user(argv):
    # runuser lives in /usr/sbin, not on every PATH
    return [shutil.which("runuser") or "/usr/sbin/runuser", "-u", "hkuser", "--"] + argv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    env = dict(os.environ, HK_PYTHON=sys.executable)
    up = [timed(["bash", os.path.join(REPO, "slurm", "testbed", "up.sh")], env=env) for _ in range(a.runs)]
    print("up.sh, cluster already up:      %.2f s" % statistics.median(up))

    d = tempfile.mkdtemp()
    cfg = os.path.join(d, "c.toml")
    with open(cfg, "w") as f:
        f.write('scratch_dir = "%s/s"\n' % d)
    pro = []
    for i in range(a.runs):
        e = {"SLURM_JOB_ID": str(900 + i), "SLURM_JOB_UID": "0", "SLURM_JOB_GID": "0",
             "SPANK_HANGKIT_MODE": "observe", "HPC_HANGKIT_CONFIG": cfg, "PYTHONPATH": REPO}
        pro.append(timed([sys.executable, os.path.join(REPO, "slurm", "prolog")], env=e))
    print("prolog (one node, one job):     %.2f s" % statistics.median(pro))

    for mode in ("off", "observe"):
        t = [timed(user(["srun", "--hang-detect=" + mode, "-N2", "-n8", "true"]), cwd=WORK)
             for _ in range(a.runs)]
        print("srun -N2 -n8 true, mode %-8s %.2f s" % (mode + ":", statistics.median(t)))

    jid = subprocess.check_output(user(["sbatch", "--parsable", "--hang-detect=observe", "-N2",
                                        "-o", "/dev/null", "--wrap", "srun sleep 60"]), cwd=WORK).decode().strip()
    try:
        for _ in range(60):
            if b"RUNNING" in subprocess.check_output(["squeue", "-h", "-j", jid, "-o", "%T"]):
                break
            time.sleep(0.5)
        time.sleep(2)
        probe = [timed(user(["srun", "--overlap", "--jobid", jid, "-w", "hk2", "-N1", "-n1",
                             "--hang-detect=off", os.path.join(HK_ROOT, "bin", "hpc-hangkit"),
                             "slurm-probe", "--scratch", "/tmp/hpc-hangkit/job_%s/attempt_0" % jid]), cwd=WORK)
                 for _ in range(a.runs)]
        print("srun --overlap probe of 1 node: %.2f s" % statistics.median(probe))
    finally:
        subprocess.run(["scancel", jid])


if __name__ == "__main__":
    main()
