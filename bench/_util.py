"""Shared helpers for the bench scripts: child-process measurement, log-log fit, load check.

Not a benchmark itself. ``python bench/_util.py TASK ARGS...`` runs one measured task in a
fresh interpreter and prints one JSON line ``{"wall_s", "cpu_s", "maxrss_bytes", ...}``
(peak RSS from ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of that child, so imports and
the parent's memory are not mixed in; ``base_rss_bytes`` is the RSS before the task).
"""
import json
import math
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def load_note():
    """One line: the 1-minute load average over the core count (the machine is shared)."""
    try:
        la = os.getloadavg()[0]
    except OSError:
        return "load unknown"
    return "load average %.2f on %d cores%s" % (la, os.cpu_count() or 1,
                                                "  (HIGH: figures are noisy; ratios hold)"
                                                if la > (os.cpu_count() or 1) else "")


def loglog_slope(xs, ys):
    """Least-squares slope of log(y) over log(x): the growth exponent (1.0 = linear)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    num = sum((x - mx) * (y - my) for x, y in pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return num / den if den else float("nan")


def run_child(task, *args, timeout=3600):
    """Run ``task`` (a function name in this file) in a fresh interpreter; return its JSON dict."""
    p = subprocess.run([sys.executable, os.path.abspath(__file__), task] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError("child %s %s failed (exit %d): %s" % (task, args, p.returncode,
                                                                  p.stderr.decode()[-2000:]))
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def _rss_now():
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def _children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _measure(fn):
    """Wall, CPU (this process plus its reaped worker processes) and peak RSS (the
    larger of this process and its largest worker) of ``fn()``."""
    base = _rss_now()
    c0 = time.process_time()
    k0 = _children_cpu()
    t0 = time.perf_counter()
    extra = fn() or {}
    out = {"wall_s": time.perf_counter() - t0,
           "cpu_s": time.process_time() - c0 + _children_cpu() - k0,
           "maxrss_bytes": max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024,
           "base_rss_bytes": base}
    out.update(extra)
    return out


# --- tasks (run in the child) -------------------------------------------------------

def task_rollcall(path):
    from hpc_hangkit.rollcall import report_from_dir

    def fn():
        rep = report_from_dir(path)
        return {"verdict": rep.verdict, "suspects": list(rep.suspect_ranks)}
    import hpc_hangkit.parse.faulthandler  # noqa: F401  (imports are not the figure)
    import hpc_hangkit.parse.pyspy  # noqa: F401
    return _measure(fn)


def task_seed_rollcall(path):
    import anchors

    def fn():
        v, sus = anchors.seed_rollcall(path)
        return {"verdict": v, "suspects": sus}
    return _measure(fn)


def task_read_only(path):
    def fn():
        n = 0
        for root, _, names in os.walk(path):
            for nm in names:
                with open(os.path.join(root, nm), "rb") as fh:
                    n += len(fh.read())
        return {"bytes": n}
    return _measure(fn)


def task_merge(nodes, per_node):
    import gen_dumps
    from hpc_hangkit.rollcall import build_report, merge

    sums, expect = gen_dumps.node_summaries(int(nodes), int(per_node))
    blobs = [json.dumps(s) for s in sums]
    del sums
    res = {}

    def fn():
        t0 = time.perf_counter()
        docs = [json.loads(b) for b in blobs]
        t1 = time.perf_counter()
        m = merge(*docs)
        t2 = time.perf_counter()
        rep = build_report(m, now=0.0)
        t3 = time.perf_counter()
        res.update({"load_s": t1 - t0, "merge_s": t2 - t1, "report_s": t3 - t2, "verdict": rep.verdict,
                    "suspects": list(rep.suspect_ranks), "expect": expect,
                    "summary_bytes": sum(len(b) for b in blobs)})
        return res
    return _measure(fn)


if __name__ == "__main__":
    t = sys.argv[1]
    print(json.dumps(globals()["task_" + t](*sys.argv[2:])))
