"""Figure 8: watchdog robustness. N on-demand dumps (default 10,000) of a call-heavy loop
armed by the hpc-hangkit job environment, through the default path (the rank's watchdog
thread writes the dump under the GIL); prints the dumps written and the crash count (target
0). Second row, same run: the same through the direct path (a signal to the main thread,
``faulthandler.register`` dumping from C), which is what only GIL-held stalls use, to show
the CPython 3.11/3.12 hazard it carries in running code. Anchor, same run: a call-heavy loop under
``faulthandler.dump_traceback_later(period, repeat=True)`` (the seed's watchdog) for the
same wall time; prints its dump and crash counts.

    python bench/bench_watchdog_robustness.py [--dumps 10000] [--paths thread,direct] [--quick]
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

# the worst case found here: deep call/return (fib) plus tiny methods and a generator,
# the same loop as tests/test_watchdog.py::test_two_thousand_on_demand_dumps_of_a_call_heavy_loop
LOOP = ("import sys, time\n"
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "class Box:\n    def __init__(self, v):\n        self.v = v\n    def get(self):\n        return self.v\n"
        "end = time.time() + float(sys.argv[1])\n"
        "total = 0\n"
        "while time.time() < end:\n    total += fib(14) + sum(Box(i).get() for i in range(50))\n")
ANCHOR = ("import faulthandler, sys, os\nfaulthandler.dump_traceback_later(float(sys.argv[2]), repeat=True, "
          "file=open(os.devnull, 'w'))\n" + LOOP)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dumps", type=int, default=10000)
    ap.add_argument("--per-proc", type=int, default=1000)
    ap.add_argument("--paths", default="thread,direct", help="comma list of thread,direct")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    n = 200 if a.quick else a.dumps
    from hpc_hangkit.config import load_settings
    from hpc_hangkit.arm.watchdog import request_dump

    print("bench_watchdog_robustness: %s" % _util.load_note())
    tmp = tempfile.mkdtemp(prefix="hk_wdrob_")
    s = load_settings(env={"HANGKIT_MODE": "observe", "HANGKIT_WATCHDOG_PERIOD_S": "3600",
                           "HPC_HANGKIT_CONFIG": ""}, path=None)
    results = {}
    total_procs = 0
    for path in a.paths.split(","):
        sent = crashes = procs = written = 0
        t0 = time.perf_counter()
        pdir = os.path.join(tmp, path)
        while written < n:
            procs += 1
            sdir = os.path.join(pdir, "p%d" % procs)
            env = s.to_env(sdir, dict(os.environ, RANK="0", WORLD_SIZE="1"))
            p = subprocess.Popen([sys.executable, "-c", LOOP, "600"], env=env, start_new_session=True)
            time.sleep(0.5)  # armed at start-up; loop running
            k = got = 0
            # requests are paced until this process has written per_proc dumps (a request
            # that arrives while the previous one is pending is merged, as signals are)
            while got < min(a.per_proc, n - written) and p.poll() is None:
                try:
                    request_dump(p.pid, s.watchdog_signal, direct=(path == "direct"))
                except ProcessLookupError:
                    break
                sent += 1
                k += 1
                time.sleep(0.002)
                if k % 50 == 0:
                    got = _count_dumps(sdir)
            time.sleep(0.2)
            written += _count_dumps(sdir)
            if p.poll() is not None and p.returncode != 0:
                crashes += 1
                print("%s path: process %d died: returncode %d after %d requests" % (path, p.pid, p.returncode, k))
            else:
                p.kill()
                p.wait()
        wall = time.perf_counter() - t0
        dumps = _count_dumps(pdir)
        total_procs += procs
        results[path] = (sent, dumps, crashes)
        print("%s path: %d requests -> %d dumps written, into %d processes in %.1f s: %d crashes%s"
              % (path, sent, dumps, procs, wall, crashes, " (target 0)" if path == "thread" else
                 " (CPython 3.11/3.12 hazard; used only for GIL-held stalls)"))
    procs = max(1, total_procs // max(1, len(results)))
    ours_s = 1.0 * n / 500
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
    return 1 if results.get("thread", (0, 0, 0))[2] else 0


def _count_dumps(root):
    n = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".log"):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    n += fh.read().count(b"(most recent call first):")
    return n


if __name__ == "__main__":
    sys.exit(main())
