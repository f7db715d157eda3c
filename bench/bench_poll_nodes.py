"""The batch monitor's probe of the other nodes at 2, 8, 16 and 32 nodes (8 tiny ranks each), and
its detection latency at 32 nodes, on an N-node test cluster of its own.

Run as root on the host of a test cluster brought up for it (never the default one other tests
use; the bench neither starts nor stops it), from a checkout whose Python environment is not
under /tmp (each node mounts a /tmp of its own). To measure one commit while the working tree
changes, run from a snapshot; the figures then name the commit in its COMMIT file:

    git archive HEAD | tar -x -C /var/tmp/hk-scale-src
    git log -1 --format='%h %cI %s' > /var/tmp/hk-scale-src/COMMIT
    cd /var/tmp/hk-scale-src

    HK_NODES=32 HK_ETC=/etc/slurm-scale HK_ROOT=/var/tmp/hk-scale HK_CTLD_PORT=7400 \\
        HK_SLURMD_PORT=7401 bash slurm/testbed/up.sh
    . /var/tmp/hk-scale/run/env
    python bench/bench_poll_nodes.py [--nodes 2,8,16,32] [--reps 5] [--latency-nodes 32]
                                     [--latency-runs 2] [--window 12] [--poll-interval 1] [--json OUT]
                                     [--answer raw|summary] [--stop-node hkK]

Poll figures. For each N a job of N nodes x 8 ranks (``bench/tiny_rank.py``, armed by the SPANK
plugin like any Python task; rank 1 hangs at another line than the rest) is submitted as
``hkuser`` with ``--hang-detect=observe`` and a poll interval so long that its own monitor stays
out of the way. Once every rank has written its hang timestamp (and ``--settle`` s more, for
watchdog dumps), the batch script runs this file with ``--inner`` in the batch step, as the
job's user, with the monitor's environment: it builds the batch monitor's sources exactly as
the monitor does (:meth:`hpc_hangkit.slurm.batch.BatchMonitor.sources`, poll interval
``--poll-interval``) and calls its stack source's probe of the other N-1 nodes ``--reps``
times, one poll interval apart. Per call: wall time (``time.perf_counter``), CPU of the
calling process and its reaped children (``resource.getrusage`` SELF + CHILDREN: srun and
whatever the probe runs here), and the CPU of the whole machine (``/proc/stat``: every node's
slurmstepd and probe process run on this one host, and so does everything else on it; on a
saturated host it is only cores x wall). Answer bytes: the probe's own node command (read from
the probe function) run once more through :func:`hpc_hangkit.slurmjob.srun_overlap`, its stdout
divided by the nodes; then once more under a wrapper on each node that prints the CPU of that
node's probe process (``getrusage`` CHILDREN there): each node's own cost of answering. Anchor:
the same ``srun --overlap`` step running ``/bin/true`` (Slurm's launch alone).

Growth exponents: log-log slope over the probed nodes (N-1). Projection to 1,000 and 10,000
nodes: see :func:`project` (the model is printed with the figures).

Latency. ``--latency-runs`` jobs of ``--latency-nodes`` x 8 ranks under the real monitor
(``sbatch --hang-detect=observe``, ``HANGKIT_CONFIRM_DURATION_S=--window``,
``HANGKIT_POLL_INTERVAL_S=--poll-interval``): latency = ``confirmed`` in the batch node's
events.jsonl minus the last rank's hang timestamp (the nodes share the host clock); target
window + one poll + 5 s. The verdict and suspects of its report are printed too. With
``--stop-node hkK`` that node's slurmd is stopped (SIGSTOP) as soon as every rank hung and
continued after the run: a node that never answers; the report's unreachable-node lines and the
monitor's probe lines are printed.

Exit status 0 when every latency run met its bound, 1 otherwise.
"""
import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

USER = "hkuser"
RANKS_PER_NODE = 8
SUSPECT = 1
#: Slurm 22.05's default TreeWidth (slurm.conf(5) of Debian 12's slurm-client 22.05.8;
#: DEFAULT_TREE_WIDTH in src/common/read_config.h)
TREE_WIDTH = 50


# --------------------------------------------------------------------------- inner side

def _machine_busy_s():
    """Busy CPU seconds of the whole host so far (all but idle and iowait), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(v) - v[3] - (v[4] if len(v) > 4 else 0)) / hz


def _cpu_s():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def _probe_argv(probe):
    """The node command the probe function runs (a list holding ``slurm-probe`` among its
    closure cells), or None."""
    for cell in getattr(probe, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, list) and "slurm-probe" in v:
            return list(v)
    return None


_REMOTE_CPU = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
               "r = resource.getrusage(resource.RUSAGE_CHILDREN); print('%.3f' % (r.ru_utime + r.ru_stime))")


def _timed(fn):
    s0, c0 = _cpu_s()
    m0 = _machine_busy_s()
    t0 = time.perf_counter()
    got = fn()
    wall = time.perf_counter() - t0
    m1 = _machine_busy_s()
    s1, c1 = _cpu_s()
    return got, {"wall_s": wall, "cpu_self_s": s1 - s0, "cpu_children_s": c1 - c0,
                 "machine_cpu_s": m1 - m0, "load1": os.getloadavg()[0]}


def inner(reps, poll, out):
    """In the batch step, as the job's user: the monitor's probe of the other nodes, timed.

    The stack source is the one :meth:`BatchMonitor.sources` builds; each poll is its
    :class:`hpc_hangkit.slurm.sources.BackgroundProbe` started over the other nodes, waited
    for, and its answer taken (srun's streamed answers folded in that thread, as in the
    monitor)."""
    from hpc_hangkit import slurmjob as slurm
    from hpc_hangkit.config import load_settings
    from hpc_hangkit.slurm.batch import BatchMonitor
    from hpc_hangkit.slurm.sources import SlurmStackSource

    env = dict(os.environ)
    env["HANGKIT_POLL_INTERVAL_S"] = "%g" % poll   # the measured poll, not the parked monitor's
    env["HANGKIT_CONFIRM_DURATION_S"] = "%g" % max(60.0, 2 * poll)
    settings = load_settings(env=env)
    bm = BatchMonitor(settings, env, [sys.executable, "-m", "hpc_hangkit"])
    srcs = bm.sources()
    res = {"host": bm.host, "others": bm.others, "polls": [], "anchor": []}
    try:
        src = next(s for s in srcs if isinstance(s, SlurmStackSource))
        bg = src.background

        def one():
            bg.start(list(bm.others))
            bg.wait()
            return bg.take()
        for i in range(reps):
            time.sleep(poll)
            ans, row = _timed(one)
            row["answered"] = len(getattr(ans, "answered", ()) or ())
            row["missing"] = sorted((getattr(ans, "missing", None) or {}).keys())
            row["summaries"] = len(getattr(ans, "nodes", ()) or ())
            row["raw_files"] = len(getattr(ans, "files", ()) or ())
            res["polls"].append(row)
        argv = _probe_argv(bg.probe)
        res["probe_argv"] = argv[2:] if argv else None
        if argv:
            p = slurm.srun_overlap(bm.job_id, bm.others, argv, timeout=300)
            res["answer_bytes"] = len(p.stdout)
            res["answer_tasks"] = len({ln.split(b":", 1)[0] for ln in p.stdout.splitlines() if b":" in ln})
            # each node's own cost of answering: the CPU of its probe process, measured there
            # (the host's CPU counters say nothing here: others load the same two cores)
            p = slurm.srun_overlap(bm.job_id, bm.others, [sys.executable, "-c", _REMOTE_CPU] + argv,
                                   timeout=300)
            res["remote_cpu_s"] = [float(ln.split(b":", 1)[1]) for ln in p.stdout.splitlines()
                                   if b":" in ln and ln.split(b":", 1)[1].strip().replace(b".", b"").isdigit()]
        for i in range(reps):
            time.sleep(poll)
            _, row = _timed(lambda: slurm.srun_overlap(bm.job_id, bm.others, ["/bin/true"], timeout=300))
            res["anchor"].append(row)
    finally:
        if bm.view_dir:
            shutil.rmtree(bm.view_dir, ignore_errors=True)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, out)
    return 0


# --------------------------------------------------------------------------- outer side

def _conf():
    hk_root = os.environ.get("HK_ROOT", "/var/tmp/hk-scale")
    conf = os.environ.get("SLURM_CONF", "/etc/slurm-scale/slurm.conf")
    if conf == "/etc/slurm/slurm.conf" or hk_root == "/var/tmp/hk-slurm":
        raise SystemExit("bench_poll_nodes runs on a cluster of its own, not the default test cluster "
                         "(source its $HK_ROOT/run/env)")
    return hk_root, conf


def _user_env(conf, extra):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/" + USER, "USER": USER,
           "LOGNAME": USER, "LANG": "C.UTF-8", "SLURM_CONF": conf}
    env.update(extra)
    return env


def _slurm_env(conf):
    return dict(os.environ, SLURM_CONF=conf)


def _submit(work, conf, name, text, extra_env):
    path = os.path.join(work, "%s-%d.sh" % (name, os.getpid()))
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    runuser = shutil.which("runuser") or "/usr/sbin/runuser"
    p = subprocess.run([runuser, "-u", USER, "--", "sbatch", "--parsable", "--hang-detect=observe", path],
                       cwd=work, env=_user_env(conf, extra_env), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    if p.returncode != 0:
        raise SystemExit("sbatch failed: %s" % p.stderr.decode(errors="replace"))
    return p.stdout.decode().strip().split(";")[0]


def _cancel(job, conf):
    subprocess.run(["scancel", job], env=_slurm_env(conf), stderr=subprocess.DEVNULL, timeout=60)
    # wait for the job to leave the nodes, so the next job starts on a quiet cluster
    for _ in range(240):
        p = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=_slurm_env(conf),
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
        if not p.stdout.strip():
            return
        time.sleep(0.5)


def _queued(job, conf):
    p = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=_slurm_env(conf),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    return bool(p.stdout.strip()) or p.returncode != 0


def _stamps(d):
    out = []
    for n in os.listdir(d):
        if n.isdigit():
            try:
                out.append(float(open(os.path.join(d, n)).read()))
            except (OSError, ValueError):
                pass
    return out


def _ranks_line(py, work, stamps):
    return "srun %s %s/tiny_rank.py --stamps %s --suspect %d" % (py, work, stamps, SUSPECT)


def poll_run(hk_root, conf, n, reps, poll, settle, timeout, answer=""):
    work = os.path.join(hk_root, "work")
    stamps = os.path.join(work, "poll-stamps-%d-%d" % (n, os.getpid()))
    shutil.rmtree(stamps, ignore_errors=True)
    os.makedirs(stamps)
    os.chmod(stamps, 0o777)
    result = os.path.join(work, "poll-result-%d-%d.json" % (n, os.getpid()))
    if os.path.exists(result):
        os.unlink(result)
    py = sys.executable
    text = """#!/bin/bash
#SBATCH -N %(n)d --ntasks-per-node=%(rpn)d -t %(t)d -o %(work)s/out-%%j.txt -J hk-poll-%(n)d
%(ranks)s &
for _ in $(seq 1200); do [ "$(ls %(stamps)s | wc -l)" -ge "$SLURM_NTASKS" ] && break; sleep 0.5; done
sleep %(settle)g
env PYTHONPATH=%(repo)s HPC_HANGKIT_CONFIG=%(hk_root)s/etc/config.toml %(py)s %(repo)s/bench/bench_poll_nodes.py \\
    --inner --reps %(reps)d --poll-interval %(poll)g --out %(result)s ||
    echo '{"error": "the inner measurement failed: see the job output"}' > %(result)s
kill %%1 2>/dev/null; wait
""" % {"n": n, "rpn": RANKS_PER_NODE, "t": int(timeout // 60) + 2, "work": work, "stamps": stamps,
       "ranks": _ranks_line(py, work, stamps), "settle": settle, "repo": ROOT, "hk_root": hk_root,
       "py": py, "reps": reps, "poll": poll, "result": result}
    # the job's own monitor is parked (one poll an hour): only the measured probes run
    extra = {"HANGKIT_POLL_INTERVAL_S": "3600", "HANGKIT_CONFIRM_DURATION_S": "7200"}
    if answer:
        extra["HANGKIT_PROBE_ANSWER"] = answer
    job = _submit(work, conf, "poll-%d" % n, text, extra)
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < timeout and not os.path.exists(result) and _queued(job, conf):
            time.sleep(1.0)
    finally:
        _cancel(job, conf)
    if not os.path.exists(result):
        out = os.path.join(work, "out-%s.txt" % job)
        tail = open(out, errors="replace").read()[-1500:] if os.path.exists(out) else ""
        return {"job": job, "n": n, "error": "no result in %.0f s; job output: %s" % (timeout, tail)}
    with open(result) as f:
        res = json.load(f)
    if "error" in res:
        out = os.path.join(work, "out-%s.txt" % job)
        res["error"] += ": " + (open(out, errors="replace").read()[-1500:] if os.path.exists(out) else "")
        res.update(job=job, n=n)
        return res
    st = _stamps(stamps)
    res.update(job=job, n=n, ranks_hung=len(st))
    shutil.rmtree(stamps, ignore_errors=True)
    return res


def _slurmd_pid(hk_root, node):
    try:
        pid = int(open(os.path.join(hk_root, "run", "slurmd-%s.pid" % node)).read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        return pid if open("/proc/%d/comm" % pid).read().strip() == "slurmd" else None
    except OSError:
        return None


def latency_run(hk_root, conf, n, window, poll, timeout, stop_node=None):
    from bench_detect_latency import events
    work = os.path.join(hk_root, "work")
    stamps = os.path.join(work, "lat-stamps-%d-%d" % (n, os.getpid()))
    shutil.rmtree(stamps, ignore_errors=True)
    os.makedirs(stamps)
    os.chmod(stamps, 0o777)
    text = """#!/bin/bash
#SBATCH -N %(n)d --ntasks-per-node=%(rpn)d -t %(t)d -o %(work)s/out-%%j.txt -J hk-lat-%(n)d
%(ranks)s
""" % {"n": n, "rpn": RANKS_PER_NODE, "t": int(timeout // 60) + 2, "work": work,
       "ranks": _ranks_line(sys.executable, work, stamps)}
    job = _submit(work, conf, "lat-%d" % n, text, {"HANGKIT_CONFIRM_DURATION_S": "%g" % window,
                                                    "HANGKIT_POLL_INTERVAL_S": "%g" % poll})
    hd = os.path.join(hk_root, "nodes", "hk1", "tmp", "hpc-hangkit", "job_%s" % job, "attempt_0",
                      "hang_detector")
    ev_path = os.path.join(hd, "events.jsonl")
    t0 = time.monotonic()
    conf_ev, rep, log = None, None, ""
    stopped, stopped_at = None, None
    try:
        while time.monotonic() - t0 < timeout:
            if stop_node and stopped is None and len(_stamps(stamps)) >= n * RANKS_PER_NODE:
                # that node's slurmd stops answering during the hang (its ranks keep running)
                stopped = _slurmd_pid(hk_root, stop_node)
                if stopped is None:
                    raise SystemExit("no running slurmd for %s in %s/run" % (stop_node, hk_root))
                os.kill(stopped, signal.SIGSTOP)
                stopped_at = time.time()
            conf_ev = next((e for e in events(ev_path) if e.get("kind") == "confirmed"), None)
            if conf_ev is not None and os.path.exists(os.path.join(hd, "report.json")):
                break
            time.sleep(0.5)
        time.sleep(1.0)
        try:
            with open(os.path.join(hd, "report.json")) as f:
                rep = json.load(f)
        except (OSError, ValueError):
            rep = None
        try:
            txt = open(os.path.join(hd, "report.txt"), errors="replace").read().splitlines()
        except OSError:
            txt = []
        unreach = [ln.strip() for i, ln in enumerate(txt)
                   if "unreachable" in ln or (i and "unreachable" in txt[i - 1])][:4]
        try:
            log = open(os.path.join(hd, "monitor.log"), errors="replace").read()
        except OSError:
            log = ""
        st = _stamps(stamps)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        _cancel(job, conf)
    shutil.rmtree(stamps, ignore_errors=True)
    res = {"job": job, "n": n, "ranks_hung": len(st), "confirmed": conf_ev is not None,
           "load1": os.getloadavg()[0]}
    if rep:
        res.update(verdict=rep.get("verdict"), suspects=rep.get("suspect_ranks"),
                   unreachable=rep.get("unreachable"))
    if stopped_at is not None:
        res.update(stopped_node=stop_node, stopped_at=stopped_at, report_unreachable=unreach)
        res["probe_lines"] = [ln.split("] ", 1)[-1][:200] for ln in log.splitlines()
                              if "answered" in ln or "unreachable" in ln][:4]
    slow = [ln.split("] ", 1)[-1][:160] for ln in log.splitlines()
            if "took" in ln and ("prob" in ln or "poll" in ln)]
    res["slow_notes"] = slow[:3]
    if conf_ev is not None and st:
        res.update(hang_start=max(st), first_stamp=min(st), latency_s=conf_ev["t"] - max(st),
                   stalled_for_s=conf_ev.get("stalled_for_s"))
    return res


def _shape(argv):
    if argv and "--answer" in argv:
        return argv[argv.index("--answer") + 1]
    return "?"


def _median(rows, key):
    v = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(v) if v else float("nan")


def _linfit(xs, ys):
    """Least-squares a + b*x."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0
    return my - b * mx, b


def project(rows, nodes_out=(1000, 10000), tree_width=TREE_WIDTH):
    """Projection of one poll to ``nodes_out`` nodes, from the measured rows.

    Model (stated, not measured at that size):

    - the batch node's work (srun and the monitor's folding of the answers: CPU self +
      children here) is linear in the probed nodes: a + b*(N-1), fitted over the rows;
      srun's I/O is one connection and one answer per node into this one process (the
      stdout funnel), so the answer bytes per node enter b;
    - each other node's own work (slurmstepd, the probe process) runs in parallel on a real
      cluster: it adds the wall time of the smallest measured poll once (one node probed),
      not once per node (here every node shares two cores, so it is in the measured wall);
    - Slurm's launch fans out through slurmd with width TreeWidth (default 50 in 22.05):
      ceil(log_W(N)) hops, each priced at the smallest anchor (``srun /bin/true`` over one
      node) wall.

    Returns ``{N: {"wall_s", "batch_cpu_s", "hops"}}``."""
    import math
    xs = [r["n"] - 1 for r in rows]
    cpu = [r["cpu_s"] for r in rows]
    a, b = _linfit(xs, cpu)
    base = min(rows, key=lambda r: r["n"])
    remote_s = base["wall_s"]
    hop_s = base.get("anchor_wall_s") or 0.0
    out = {}
    for n in nodes_out:
        hops = max(1, math.ceil(math.log(n) / math.log(tree_width) - 1e-9))
        batch = a + b * (n - 1)
        out[n] = {"batch_cpu_s": batch, "hops": hops,
                  "wall_s": remote_s + (hops - 1) * hop_s + max(0.0, batch - base["cpu_s"])}
    out["model"] = {"cpu_a_s": a, "cpu_b_s_per_node": b, "remote_s": remote_s, "hop_s": hop_s,
                    "tree_width": tree_width}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--nodes", default="2,8,16,32")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--poll-interval", type=float, default=1.0)
    ap.add_argument("--settle", type=float, default=4.0,
                    help="seconds after the last rank hung before the first probe")
    ap.add_argument("--latency-nodes", type=int, default=32)
    ap.add_argument("--latency-runs", type=int, default=2)
    ap.add_argument("--window", type=float, default=12.0, help="confirm window of the latency runs (s)")
    ap.add_argument("--stop-node", help="in the latency runs, stop (SIGSTOP) this node's slurmd once every "
                    "rank hung, and let it go on (SIGCONT) after the run: a node that never answers")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds allowed to one job")
    ap.add_argument("--answer", default="", help="HANGKIT_PROBE_ANSWER for the jobs (raw, summary, auto; "
                    "default: the monitor's own choice)")
    ap.add_argument("--json", help="write every figure here too")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.inner:
        return inner(a.reps, a.poll_interval, a.out)

    import _util
    if os.geteuid() != 0:
        raise SystemExit("run as root on the host of the test cluster (it submits as hkuser)")
    hk_root, conf = _conf()
    work = os.path.join(hk_root, "work")
    shutil.copy(os.path.join(HERE, "tiny_rank.py"), os.path.join(work, "tiny_rank.py"))
    os.chmod(os.path.join(work, "tiny_rank.py"), 0o644)
    commit = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %cI %s"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL).stdout.decode().strip()[:100]
    if not commit and os.path.exists(os.path.join(ROOT, "COMMIT")):
        # a snapshot of a commit (git archive), so that the cluster runs exactly that commit
        commit = open(os.path.join(ROOT, "COMMIT")).read().strip()
    commit = commit or "unknown (not a git checkout, and no COMMIT file beside bench/)"
    print("bench_poll_nodes: %s; commit %s" % (_util.load_note(), commit))
    allres = {"commit": commit, "polls": [], "latency": []}
    rows = []
    for n in [int(x) for x in a.nodes.split(",") if x.strip()]:
        r = poll_run(hk_root, conf, n, a.reps, a.poll_interval, a.settle, a.timeout, a.answer)
        allres["polls"].append(r)
        if "error" in r:
            print("N=%2d (job %s): %s" % (n, r["job"], r["error"]))
            continue
        ps, an = r["polls"], r["anchor"]
        row = {"n": n, "wall_s": _median(ps, "wall_s"),
               "cpu_s": statistics.median([p["cpu_self_s"] + p["cpu_children_s"] for p in ps]),
               "cpu_self_s": _median(ps, "cpu_self_s"), "machine_cpu_s": _median(ps, "machine_cpu_s"),
               "anchor_wall_s": _median(an, "wall_s"), "anchor_machine_cpu_s": _median(an, "machine_cpu_s"),
               "anchor_cpu_s": statistics.median([p["cpu_self_s"] + p["cpu_children_s"] for p in an]),
               "bytes_per_node": (r.get("answer_bytes") or 0) / max(1, n - 1),
               "remote_cpu_s": statistics.median(r["remote_cpu_s"]) if r.get("remote_cpu_s") else float("nan"),
               "answered": [p["answered"] for p in ps], "load1": _median(ps, "load1"),
               "missing": sorted({m for p in ps for m in p.get("missing") or ()}),
               "shape": _shape(r.get("probe_argv"))}
        rows.append(row)
        print("N=%2d (job %s, %d ranks hung, %s answers): poll wall %.2f s (min %.2f, max %.2f), CPU %.2f s "
              "(self %.2f), machine CPU %.2f s; each node's probe process %.2f s CPU; %.0f answer bytes/node; answered %s; "
              "anchor srun /bin/true %.2f s wall, %.2f s CPU, machine %.2f s; load %.1f%s"
              % (n, r["job"], r["ranks_hung"], row["shape"], row["wall_s"], min(p["wall_s"] for p in ps),
                 max(p["wall_s"] for p in ps), row["cpu_s"], row["cpu_self_s"], row["machine_cpu_s"],
                 row["remote_cpu_s"], row["bytes_per_node"], row["answered"], row["anchor_wall_s"], row["anchor_cpu_s"],
                 row["anchor_machine_cpu_s"], row["load1"], "; NOT ANSWERED: " + ",".join(row["missing"]) if row["missing"] else ""))
    allres["rows"] = rows
    if len(rows) >= 2:
        xs = [r["n"] - 1 for r in rows]
        ex = {k: _util.loglog_slope(xs, [r[k] for r in rows])
              for k in ("wall_s", "cpu_s", "machine_cpu_s", "anchor_wall_s", "anchor_cpu_s")}
        allres["exponents"] = ex
        print("growth exponents over the probed nodes %s: poll wall %.2f, CPU %.2f, machine CPU %.2f; "
              "anchor (Slurm's launch alone) wall %.2f, CPU %.2f"
              % (xs, ex["wall_s"], ex["cpu_s"], ex["machine_cpu_s"], ex["anchor_wall_s"], ex["anchor_cpu_s"]))
        pj = project(rows)
        allres["projection"] = pj
        m = pj["model"]
        print("model: batch-node CPU = %.3f s + %.4f s x probed nodes; other nodes' own work in parallel "
              "(%.2f s, the 1-node poll); TreeWidth %d, one hop priced %.2f s"
              % (m["cpu_a_s"], m["cpu_b_s_per_node"], m["remote_s"], m["tree_width"], m["hop_s"]))
        for n in (1000, 10000):
            print("projection N=%d: %d hop(s), batch-node CPU %.1f s, poll wall ~%.1f s"
                  % (n, pj[n]["hops"], pj[n]["batch_cpu_s"], pj[n]["wall_s"]))
    ok = True
    bound = a.window + a.poll_interval + 5.0
    for i in range(a.latency_runs):
        r = latency_run(hk_root, conf, a.latency_nodes, a.window, a.poll_interval, a.timeout, a.stop_node)
        allres["latency"].append(r)
        if "latency_s" not in r:
            ok = False
            print("latency run %d, N=%d (job %s): NO LATENCY (confirmed %s, %d ranks hung) %s"
                  % (i + 1, a.latency_nodes, r["job"], r["confirmed"], r["ranks_hung"], r["slow_notes"]))
            continue
        met = r["latency_s"] <= bound
        ok = ok and met
        print("latency run %d, N=%d (job %s, %d ranks): last rank hung -> confirmed %.2f s "
              "(ranks reached their lines over %.1f s; stalled_for %.1f s) [bound %.1f s: %s]; "
              "verdict %s, suspects %s; load %.1f%s"
              % (i + 1, a.latency_nodes, r["job"], r["ranks_hung"], r["latency_s"],
                 r["hang_start"] - r["first_stamp"], r.get("stalled_for_s") or 0, bound,
                 "met" if met else "MISSED", r.get("verdict"), r.get("suspects"), r["load1"],
                 "; " + " | ".join(r["slow_notes"]) if r["slow_notes"] else ""))
        if r.get("stopped_node"):
            print("    slurmd of %s stopped %.1f s after the last rank hung; report: %s; %s"
                  % (r["stopped_node"], r["stopped_at"] - r["hang_start"],
                     " / ".join(r.get("report_unreachable") or []) or "no unreachable node",
                     " | ".join(r.get("probe_lines") or ["no probe line in the monitor log"])))
    print("end: %s" % _util.load_note())
    if a.json:
        with open(a.json, "w") as f:
            json.dump(allres, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
