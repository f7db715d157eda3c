"""Detection latency of the Slurm batch-step monitor on the 2-node test cluster (remote node probed).

Target: confirmed within confirm window + one poll + 5 s, for windows of 12 s and 60 s.

Run as root with the test cluster up (``bash slurm/testbed/up.sh``; the bench never starts
or stops it):

    python bench/bench_slurm_latency.py [--windows 12,60] [--runs 5] [--poll-interval 1]

Each run submits, as ``hkuser``, a 4-rank gloo job across both nodes (2 ranks per node;
``examples/gloo_divergent.py``: rank 1 skips an ``all_reduce``) with
``HANGKIT_CONFIRM_DURATION_S=W HANGKIT_POLL_INTERVAL_S=P sbatch --hang-detect=observe``,
waits for ``confirmed`` in the batch node's ``hang_detector/events.jsonl``, cancels the job
and measures

    latency = t(confirmed) - t(hang start)

where the hang start is the moment the last rank entered its final collective: the
largest ``time_created_ns`` of the last Flight Recorder entry over the dumps the capture
brought into the batch node's tree (both nodes; the testbed's nodes share the host clock).
The anchor is the bound itself (W + P + 5 s), printed beside each run, with the poll
figures of the same run: how long one ``srun --overlap`` probe took (``slow_poll``/probe
lines of the monitor log) and how much of the latency was the confirm window. Also printed
per run: the sample spread of the capture at confirmation (``report.json`` ``sample_spread``:
first to last stack taken, per node; target <= 1 s, remote node included).

Exit status 0 when every run confirmed within its bound, 1 otherwise.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import _util  # noqa: E402
from _jobs import free_port  # noqa: E402
from bench_detect_latency import events, hang_start  # noqa: E402

HK_ROOT = os.environ.get("HK_ROOT", "/var/tmp/hk-slurm")
WORK = os.path.join(HK_ROOT, "work")
USER = "hkuser"
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"  # not on a plain user PATH


def node_hd(node, job, attempt=0):
    return os.path.join(HK_ROOT, "nodes", node, "tmp", "hpc-hangkit", "job_%s" % job,
                        "attempt_%d" % attempt, "hang_detector")


def script(minutes):
    return """#!/bin/bash
#SBATCH -N2 --ntasks-per-node=2 -t %(t)d -o %(work)s/out-%%j.txt
export MASTER_ADDR=127.0.0.1 MASTER_PORT=%(port)d WORLD_SIZE=$SLURM_NTASKS
srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec %(py)s %(work)s/gloo_divergent.py --skip-step 3'
""" % {"t": minutes, "work": WORK, "port": free_port(), "py": sys.executable}


def user_env(extra):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/" + USER, "USER": USER,
           "LOGNAME": USER, "LANG": "C.UTF-8"}
    if os.environ.get("SLURM_CONF"):  # a second test cluster (slurm/testbed/up.sh HK_ETC)
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
    env.update(extra)
    return env


def one_run(window, poll, timeout):
    path = os.path.join(WORK, "bench-latency-%d.sh" % os.getpid())
    with open(path, "w") as f:
        f.write(script(int(window // 60) + 3))
    os.chmod(path, 0o755)
    env = user_env({"HANGKIT_CONFIRM_DURATION_S": str(window), "HANGKIT_POLL_INTERVAL_S": str(poll)})
    p = subprocess.run([RUNUSER, "-u", USER, "--", "sbatch", "--parsable", "--hang-detect=observe",
                        path], cwd=WORK, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60)
    if p.returncode != 0:
        raise SystemExit("sbatch failed: %s" % p.stderr.decode(errors="replace"))
    job = p.stdout.decode().strip().split(";")[0]
    hd = node_hd("hk1", job)
    ev_path = os.path.join(hd, "events.jsonl")
    t0 = time.monotonic()
    conf = None
    try:
        while time.monotonic() - t0 < timeout:
            evs = events(ev_path)
            conf = next((e for e in evs if e.get("kind") == "confirmed"), None)
            if conf is not None and os.path.exists(os.path.join(hd, "report.json")):
                break   # captured: the Flight Recorder dumps of both nodes are in the tree
            time.sleep(0.5)
    finally:
        subprocess.run(["scancel", job], stderr=subprocess.DEVNULL, timeout=30)
    res = {"job": job, "confirmed": conf is not None}
    evs = events(ev_path)
    slow = [e for e in evs if e.get("kind") == "slow_poll"]
    res["slow_poll_s"] = slow[0]["seconds"] if slow else None
    try:
        log = open(os.path.join(hd, "monitor.log"), errors="replace").read()
    except OSError:
        log = ""
    probe = [ln for ln in log.splitlines() if "probing the other node(s) took" in ln]
    res["probe_note"] = probe[0].split("WARNING ", 1)[-1][:60] if probe else None
    try:
        with open(os.path.join(hd, "report.json")) as f:
            res["spread"] = json.load(f).get("sample_spread")
    except (OSError, ValueError):
        res["spread"] = None
    start, n = hang_start(hd)
    res.update(start=start, fr_ranks=n)
    if conf is not None and start is not None:
        res.update(latency_s=conf["t"] - start, stalled_for_s=conf.get("stalled_for_s"))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", default="12,60", help="confirm windows in seconds, comma-separated")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--poll-interval", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=0.0,
                    help="seconds allowed to a run (default: window + 150)")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root on the host of the test cluster (it submits as hkuser)")
    shutil.copy(os.path.join(ROOT, "examples", "gloo_divergent.py"), os.path.join(WORK, "gloo_divergent.py"))
    os.chmod(os.path.join(WORK, "gloo_divergent.py"), 0o644)
    print("bench_slurm_latency: batch monitor, 4-rank gloo hang on 2 nodes, poll %g s; %s"
          % (a.poll_interval, _util.load_note()))
    ok = True
    for window in [float(w) for w in a.windows.split(",") if w.strip()]:
        bound = window + a.poll_interval + 5.0
        lat, spreads = [], []
        for i in range(a.runs):
            r = one_run(window, a.poll_interval, a.timeout or window + 150.0)
            if "latency_s" not in r:
                ok = False
                print("window %g s run %d (job %s): NO LATENCY (confirmed %s, hang start %s from %d "
                      "Flight Recorder dumps)" % (window, i + 1, r["job"], r["confirmed"], r["start"],
                                                  r["fr_ranks"]))
                continue
            lat.append(r["latency_s"])
            print("window %g s run %d (job %s): hang start -> confirmed %6.2f s (stalled_for %.1f s; "
                  "first slow poll %s s; %s) [bound %.1f s: %s]"
                  % (window, i + 1, r["job"], r["latency_s"], r["stalled_for_s"] or 0,
                     r["slow_poll_s"], r["probe_note"] or "no slow probe logged", bound,
                     "met" if r["latency_s"] <= bound else "MISSED"))
            ok = ok and r["latency_s"] <= bound
            sp = r.get("spread")
            if sp:
                spreads.append(sp["spread_s"])
                print("    sample spread at confirmation: %.2f s over ranks %s (%s) [target <= 1 s: %s]"
                      % (sp["spread_s"], sp["ranks"], ", ".join("%s %.2f s" % (h, b["spread_s"])
                                                              for h, b in sp.get("nodes", {}).items()),
                         "met" if sp["spread_s"] <= 1.0 else "MISSED"))
            else:
                print("    sample spread: not in report.json (no capture-stamped stacks)")
        if lat:
            print("window %g s: median %.2f s, max %.2f s over %d run(s); target <= %.1f s: %s"
                  % (window, statistics.median(lat), max(lat), len(lat), bound,
                     "met" if max(lat) <= bound else "NOT met"))
        if spreads:
            print("window %g s: sample spread max %.2f s over %d run(s); target <= 1 s: %s"
                  % (window, max(spreads), len(spreads), "met" if max(spreads) <= 1.0 else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
