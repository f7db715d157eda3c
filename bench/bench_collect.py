"""What the epilog costs a node: wall time of the real ``slurm/epilog`` (as root,
slurmd's environment, the job's user ``nobody``) for

- an unarmed job (mode off: returns before importing hpc_hangkit),
- an armed job with no scratch on this node,
- a typical node: 8 ranks' watchdog logs (64 KiB) + heartbeats + a capture tree,
- many files: 2000 x 4 KiB,
- one large file: 256 MiB (a Flight Recorder dump, say),

to file:// storage (the same disk here, so copy + read-back verify are disk bound),
and the verified copy throughput of one 64 MiB file to an S3 server (moto on
127.0.0.1; moto is slow, so this is a floor). Prints one line per case.

Run as root:  python bench/bench_collect.py [--repeat 3]
"""
import argparse
import os
import pwd
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from collect_helpers import EPILOG, Area, epilog_env, write_site_toml  # noqa: E402


def load_note():
    la = os.getloadavg()[0]
    return "load average %.2f on %d cores" % (la, os.cpu_count() or 1)


def make_tree(area, job, uid, gid, files):
    return area.make_attempt(str(job), 0, uid, gid,
                             {rel: os.urandom(size) for rel, size in files.items()})


def run_epilog(area, job, storage_url, mode="observe", extra=None):
    pw = pwd.getpwnam("nobody")
    cfg = write_site_toml(area, storage_url)
    env = epilog_env(job, pw.pw_uid, pw.pw_gid, pw.pw_name, extra=dict(
        extra or {}, SPANK_HANGKIT_MODE=mode, HPC_HANGKIT_CONFIG=cfg,
        HANGKIT_EPILOG_HARD_TIMEOUT_S="600"))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, EPILOG], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, cwd="/")
    took = time.monotonic() - t0
    return took, p.stderr.decode().strip().splitlines()[-1:] or [""]


CASES = {
    "typical node (8 ranks)": dict(
        [("watchdog/rank_%d.pid%d.log" % (r, 100 + r), 64 << 10) for r in range(8)]
        + [("heartbeats/rank_%d.pid%d.hb" % (r, 100 + r), 256) for r in range(8)]
        + [("hang_detector/stack_traces/rank_%d.log" % r, 16 << 10) for r in range(8)]
        + [("hang_detector/report.txt", 4 << 10), ("hang_detector/events.jsonl", 8 << 10)]),
    "2000 files x 4 KiB": {"watchdog/f%04d.log" % i: 4 << 10 for i in range(2000)},
    "one 256 MiB file": {"hang_detector/flight_recorder/rank_0.json": 256 << 20},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (the epilog drops to the job's user)")
    pw = pwd.getpwnam("nobody")
    print("# bench_collect: real slurm/epilog, job user nobody; %s" % load_note())
    job = 1000
    for label, mode, files in [("unarmed job (mode off)", "off", None),
                               ("armed, no scratch here", "observe", None)] + \
            [(k, "observe", v) for k, v in CASES.items()]:
        times = []
        for _ in range(args.repeat):
            area = Area()
            job += 1
            if files:
                make_tree(area, job, pw.pw_uid, pw.pw_gid, files)
            took, last = run_epilog(area, job, "file://" + area.storage, mode)
            times.append(took)
            area.cleanup()
        total = sum(files.values()) if files else 0
        best = min(times)
        rate = (" %.0f MB/s incl. read-back verify" % (total / best / 1e6)) \
            if total >= 16 << 20 else ""
        print("%-28s best %6.2f s  median %6.2f s  (%d files, %.1f MiB)%s" % (
            label, best, sorted(times)[len(times) // 2], len(files or {}),
            total / 2 ** 20, rate))
    # S3 (moto server on loopback)
    port = 18000 + os.getpid() % 1000
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        url = "http://127.0.0.1:%d" % port
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except Exception:
                time.sleep(0.2)
        s3env = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
                 "AWS_DEFAULT_REGION": "us-east-1", "FSSPEC_S3_ENDPOINT_URL": url}
        os.environ.update(s3env)
        import s3fs
        s3fs.S3FileSystem(endpoint_url=url, skip_instance_cache=True).mkdir("bench")
        area = Area()
        job += 1
        make_tree(area, job, pw.pw_uid, pw.pw_gid, {"hang_detector/big.bin": 64 << 20})
        took, last = run_epilog(area, job, "s3://bench/p", extra=s3env)
        print("%-28s %6.2f s  (64 MiB, %.0f MB/s incl. read-back verify)  %s" % (
            "s3 (moto) one 64 MiB file", took, (64 << 20) / took / 1e6, last[0][-60:]))
        area.cleanup()
    finally:
        os.killpg(moto.pid, signal.SIGKILL)
        moto.wait()


if __name__ == "__main__":
    main()
