"""Figure 6: the monitor's CPU over 200 polls of a real hung job with the stand-in ``ncclras``.
Target: <= 0.5 % of one core at the default poll interval (15 s).

    python bench/bench_monitor_cpu.py [--polls 200] [--interval 0.5] [--ranks 4] [--quick]

A real 4-rank gloo job (``examples/gloo_divergent.py``, rank 1 skips an ``all_reduce``) is
started armed and left hung. A fresh monitor process then runs what ``hpc-hangkit run`` runs:
:class:`hpc_hangkit.detect.monitor.Monitor` over :class:`~hpc_hangkit.evidence.stacks.StackSource` (heartbeats,
watchdog logs, ``/proc/<pid>/io``, an on-demand dump request per rank per poll, the roll call) and
:class:`hpc_hangkit.evidence.ras.RasSource` (``ncclras -f json`` each poll: the stand-in in
tests/ncclras_standin/ replaying the real-format ``b_history`` polls, history written to
``hang_detector/nccl_ras/``). Time settings are scaled from the defaults by ``interval / 15``
(suspect after 4 polls, still-suspected every 8 polls, watchdog period 2 polls) except the confirm
window, which is set beyond the run so no capture happens (capture is figure 7).

CPU: ``resource.getrusage(RUSAGE_SELF)`` of the monitor process over the measured polls (3 warm-up
polls first; imports are not the figure). The stand-in ``ncclras`` children are reported apart
(``RUSAGE_CHILDREN``): they are Python scripts, the real client is a small C program. Scaled to
the default interval: ``CPU per poll / 15 s``.

Anchor, same job, same number of polls: the simplest credible monitor poll (``ncclras -f json`` +
``json.loads``, the seed's regex roll call over the watchdog logs (bench/anchors.py), one
on-demand dump request per rank).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import _jobs  # noqa: E402
import _util  # noqa: E402

STANDIN_DIR = os.path.join(ROOT, "tests", "ncclras_standin")
HISTORY = os.path.join(ROOT, "tests", "fixtures", "nccl", "b_history")
DEFAULT_POLL_S = 15.0
TARGET_PCT = 0.5
WARMUP = 3


def _cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def child(kind, scratch, hd_dir, polls, interval):
    """Run in the monitor process: WARMUP + ``polls`` polls every ``interval`` s; print one JSON line."""
    polls, interval = int(polls), float(interval)
    scale = interval / DEFAULT_POLL_S
    s = _jobs.settings(poll_interval_s=interval, suspect_after_s=60 * scale, report_every_s=120 * scale,
                       confirm_duration_s=interval * (polls + WARMUP) * 100)
    if kind == "ours":
        from hpc_hangkit.detect.detector import Detector
        from hpc_hangkit.detect.monitor import Monitor, poll_sources
        sources = poll_sources(s, scratch, hd_dir)  # the stacks, then NCCL RAS
        if len(sources) < 2:
            raise SystemExit("the ncclras stand-in is not on PATH")
        mon = Monitor(Detector.from_settings(s), sources, hd_dir=hd_dir)
        poll = mon.poll_once
    else:
        import anchors
        from hpc_hangkit.capture.ranks import discover_ranks
        from hpc_hangkit.arm.watchdog import request_dump
        pids = [rp.pid for rp in discover_ranks(scratch).values()]

        def poll():
            p = subprocess.run(["ncclras", "-f", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=10)
            json.loads(p.stdout.decode())
            anchors.seed_rollcall(os.path.join(scratch, "watchdog"))
            for pid in pids:
                request_dump(pid, s.watchdog_signal)
    kinds = {}
    marks = []
    nxt = time.monotonic()
    for i in range(WARMUP + polls):
        if i == WARMUP:
            c0, k0, w0 = _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
        if i >= WARMUP:
            marks.append(_cpu(resource.RUSAGE_SELF))
        evs = poll()
        for ev in evs or ():
            kinds[ev.kind] = kinds.get(ev.kind, 0) + 1
        nxt += interval
        time.sleep(max(0.0, nxt - time.monotonic()))
    marks.append(_cpu(resource.RUSAGE_SELF))
    q = max(1, polls // 4)
    return {"first_quarter_ms": (marks[q] - marks[0]) / q * 1e3, "last_quarter_ms": (marks[-1] - marks[-1 - q]) / q * 1e3,
            "cpu_s": _cpu(resource.RUSAGE_SELF) - c0, "children_cpu_s": _cpu(resource.RUSAGE_CHILDREN) - k0,
            "wall_s": time.monotonic() - w0, "polls": polls, "events": kinds}


def run_child(kind, scratch, hd_dir, polls, interval, env):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, scratch, hd_dir, str(polls),
                        str(interval)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT,
                       timeout=polls * interval * 20 + 300)
    if p.returncode != 0:
        raise RuntimeError("monitor child (%s) failed (exit %d): %s" % (kind, p.returncode, p.stderr.decode()[-3000:]))
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def report(label, r):
    per = r["cpu_s"] / r["polls"]
    pct = per / DEFAULT_POLL_S * 100
    kper = r["children_cpu_s"] / r["polls"]
    print("%-7s %d polls in %.1f s: monitor CPU %.3f s = %.2f ms/poll -> %.4f %% of a core at %g s polls"
          "   (+ ncclras children %.2f ms/poll -> %.4f %%)"
          % (label, r["polls"], r["wall_s"], r["cpu_s"], per * 1e3, pct, DEFAULT_POLL_S, kper * 1e3,
             kper / DEFAULT_POLL_S * 100))
    print("%-7s per poll: first quarter of the polls %.2f ms, last quarter %.2f ms (growth with the logs)"
          % ("", r["first_quarter_ms"], r["last_quarter_ms"]))
    return per, pct


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--polls", type=int, default=200)
    ap.add_argument("--interval", type=float, default=0.5, help="poll interval of the measurement (s)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="2 ranks, 10 polls at 0.2 s (smoke test)")
    a = ap.parse_args(argv)
    _jobs.exit_on_sigterm()
    if a.quick:
        a.polls, a.interval, a.ranks = 10, 0.2, 2
    print("bench_monitor_cpu: %d polls every %g s of a hung %d-rank gloo job, stand-in ncclras; "
          "target <= %.1f %% of a core at %g s polls; %s"
          % (a.polls, a.interval, a.ranks, TARGET_PCT, DEFAULT_POLL_S, _util.load_note()))
    base = tempfile.mkdtemp(prefix="hk_moncpu_")
    job = None
    try:
        scratch = os.path.join(base, "scratch")
        s = _jobs.settings(watchdog_period_s=2 * a.interval)  # default ratio: a periodic dump every 2 polls
        job = _jobs.start_hung_job(scratch, a.ranks, s=s, log_path=os.path.join(base, "job.log"))
        found = _jobs.wait_hung(scratch, a.ranks, job)
        print("job hung: ranks %s (pids %s)" % (sorted(found), [found[r].pid for r in sorted(found)]))
        polls_dir = os.path.join(base, "polls")
        shutil.copytree(HISTORY, polls_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
        env.update(PATH=STANDIN_DIR + os.pathsep + os.environ.get("PATH", ""), NCCLRAS_STANDIN_DIR=polls_dir,
                   NCCLRAS_STANDIN_STATE=os.path.join(base, "standin_state"), HPC_HANGKIT_CONFIG="")
        env.pop("NCCL_RAS_ADDR", None)
        res = {}
        for kind in ("ours", "anchor"):
            hd = os.path.join(base, "hd_" + kind)
            os.makedirs(hd)
            res[kind] = run_child(kind, scratch, hd, a.polls, a.interval, env)
            if job.poll() is not None:
                raise RuntimeError("the hung job ended during the measurement (status %s)" % job.returncode)
        per, pct = report("ours", res["ours"])
        print("        events: %s" % (res["ours"]["events"] or "none"))
        aper, _ = report("anchor", res["anchor"])
        print("ratio ours/anchor CPU per poll: %.2f" % (per / max(aper, 1e-9)))
        print("target <= %.1f %% of one core at the default %g s interval: %s (%.4f %%)"
              % (TARGET_PCT, DEFAULT_POLL_S, "met" if pct <= TARGET_PCT else "NOT met", pct))
        return 0
    finally:
        _jobs.kill_job(job)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(*sys.argv[2:])))
        sys.exit(0)
    sys.exit(main())
