"""Figure 8: watchdog robustness. N on-demand dumps (default 10,000) of a call-heavy loop
armed by the hpc-hangkit job environment (signal-driven ``faulthandler.register``); prints the
crash count (target 0). Anchor, same run: a call-heavy loop under
``faulthandler.dump_traceback_later(period, repeat=True)`` (the seed's watchdog) for the
same wall time; prints its dump and crash counts.

    python bench/bench_watchdog_robustness.py [--dumps 10000] [--quick]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import _util  # noqa: E402

LOOP = ("import sys\n"
        "def f(n):\n    return n if n < 1 else f(n - 1)\n"
        "def g():\n    for i in range(200): f(i % 30)\n"
        "import time\nend = time.time() + float(sys.argv[1])\n"
        "while time.time() < end:\n    g()\n")
ANCHOR = ("import faulthandler, sys, os\nfaulthandler.dump_traceback_later(float(sys.argv[2]), repeat=True, "
          "file=open(os.devnull, 'w'))\n" + LOOP)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dumps", type=int, default=10000)
    ap.add_argument("--per-proc", type=int, default=1000)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    n = 200 if a.quick else a.dumps
    from hpc_hangkit.config import load_settings
    from hpc_hangkit.watchdog import request_dump

    print("bench_watchdog_robustness: %s" % _util.load_note())
    tmp = tempfile.mkdtemp(prefix="hk_wdrob_")
    s = load_settings(env={"HANGKIT_MODE": "observe", "HANGKIT_WATCHDOG_PERIOD_S": "3600",
                           "HPC_HANGKIT_CONFIG": ""}, path=None)
    sent = crashes = procs = 0
    t0 = time.perf_counter()
    while sent < n:
        procs += 1
        env = s.to_env(os.path.join(tmp, "p%d" % procs), dict(os.environ, RANK="0", WORLD_SIZE="1"))
        p = subprocess.Popen([sys.executable, "-c", LOOP, "600"], env=env, start_new_session=True)
        time.sleep(0.5)  # armed at start-up; loop running
        k = 0
        while k < a.per_proc and sent < n and p.poll() is None:
            request_dump(p.pid, s.watchdog_signal)
            sent += 1
            k += 1
            time.sleep(0.002)
        time.sleep(0.2)
        if p.poll() is not None and p.returncode != 0:
            crashes += 1
            print("process %d died: returncode %d after %d dumps" % (p.pid, p.returncode, k))
        else:
            p.kill()
            p.wait()
    ours_s = time.perf_counter() - t0
    print("ours: %d on-demand dumps into %d processes in %.1f s: %d crashes (target 0)" % (sent, procs, ours_s, crashes))
    # anchor: dump_traceback_later at 2 ms for a comparable number of dumps
    a_procs = max(2, procs)
    a_crash = 0
    per = min(2.0, max(0.5, ours_s / a_procs))
    for i in range(a_procs):
        p = subprocess.run([sys.executable, "-c", ANCHOR, str(per), "0.002"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if p.returncode != 0:
            a_crash += 1
    print("anchor (dump_traceback_later, 2 ms period, ~%d dumps each): %d of %d processes crashed"
          % (int(per / 0.002), a_crash, a_procs))
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
