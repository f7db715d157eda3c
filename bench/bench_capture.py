"""Figure 7: capture of 8 local ranks of a real hung job (on-demand watchdog dumps, the sampling
plan, then ``py-spy dump`` of every rank in parallel: ``--native`` where the plan says it is worth
it). Target: <= 2 s wall, with the suspects' native stacks present.

    python bench/bench_capture.py [--ranks 8] [--reps 3] [--quick]

A real 8-rank gloo job (``examples/gloo_divergent.py`` under ``torch.distributed.run``, rank 1
skips an ``all_reduce``) is started armed and left hung. Then, ``--reps`` times, alternating:

- ours: :func:`hpc_hangkit.capture.ranks.request_dumps` + :func:`hpc_hangkit.capture.orchestrator.plan_sampling`
  + :func:`hpc_hangkit.evidence.stacks.pyspy_all` (the steps of the figure, as
  :func:`~hpc_hangkit.capture.orchestrator.capture` runs them), wall time; the suspects' files
  must hold native frames;
- anchor 1: every rank ``--native`` in parallel (``native_stacks = all``: the previous capture);
- anchor 2: ``py-spy dump --native`` of the same ranks one after the other
  (:func:`hpc_hangkit.evidence.stacks.pyspy_rank` in a loop: the same per-rank work, sequential).

Finally one full :func:`hpc_hangkit.capture.orchestrator.capture` (with the hooks: Flight Recorder dumps of
every rank, nvidia-smi, ncclras, and the copy of the scratch), for reference: the figure is the
first two steps. Prints the median and max of each, the ratio, and whether the target is met.
The job's process group is killed at the end. Exit status 1 if any py-spy dump failed.
"""
import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import _jobs  # noqa: E402
import _util  # noqa: E402

TARGET_S = 2.0


def _children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _failed(paths):
    """py-spy outputs that are why-files (``hpc-hangkit: py-spy unavailable: ...``)."""
    bad = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                if f.read(64).startswith(b"hpc-hangkit: py-spy unavailable"):
                    bad.append(p)
        except OSError:
            bad.append(p)
    return bad


def _has_native(path):
    """True if the py-spy dump at ``path`` was taken ``--native`` and holds a native frame."""
    from hpc_hangkit.parse.pyspy import parse_pyspy
    try:
        with open(path, "rb") as f:
            lg = parse_pyspy(f.read(), path)
    except OSError:
        return False
    return (lg.header or {}).get("capture", {}).get("native") == "yes" and any(
        fr.native for smp in lg.samples for t in smp.threads for fr in t.frames)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 ranks, 1 repetition (smoke test)")
    a = ap.parse_args(argv)
    _jobs.exit_on_sigterm()
    if a.quick:
        a.ranks, a.reps = 2, 1
    from hpc_hangkit.capture import orchestrator as cap
    from hpc_hangkit.capture.ranks import request_dumps
    from hpc_hangkit.evidence.stacks import pyspy_all, pyspy_rank

    print("bench_capture: %d local ranks of a hung gloo job, %d repetitions; target <= %.1f s wall; %s"
          % (a.ranks, a.reps, TARGET_S, _util.load_note()))
    base = tempfile.mkdtemp(prefix="hk_capture_")
    job = None
    bad = []
    try:
        scratch = os.path.join(base, "scratch")
        s = _jobs.settings()
        job = _jobs.start_hung_job(scratch, a.ranks, s=s, log_path=os.path.join(base, "job.log"))
        ranks = _jobs.wait_hung(scratch, a.ranks, job, timeout_s=400, until_split=True)
        print("job hung: ranks %s" % sorted(ranks))
        ours, dumps_s, plan_s, anchor, allnat, pyspy_cpu = [], [], [], [], [], []
        suspects_native, ours_cpu, allnat_cpu = [], [], []
        for i in range(a.reps):
            ctx = cap.CaptureContext(s, scratch, os.path.join(base, "ours%d" % i), ranks)
            t0 = time.perf_counter()
            request_dumps(ctx)
            t1 = time.perf_counter()
            cap.plan_sampling(ctx)
            t2 = time.perf_counter()
            c0 = _children_cpu()
            files = pyspy_all(ctx)
            t3 = time.perf_counter()
            ours_cpu.append(_children_cpu() - c0)
            ours.append(t3 - t0)
            dumps_s.append(t1 - t0)
            plan_s.append(t2 - t1)
            bad += _failed(files)
            natives = sorted(r for r, p in ctx.sampling.items() if p.native)
            sus = [r for r, p in ctx.sampling.items() if p.why == "suspect"]
            suspects_native.append(all(_has_native(os.path.join(ctx.hd_dir, "stack_traces",
                                                                  "rank_%d.log" % r)) for r in sus) and bool(sus))
            nctx = cap.CaptureContext(s, scratch, os.path.join(base, "allnative%d" % i), ranks)
            c0 = _children_cpu()
            t0 = time.perf_counter()
            files = pyspy_all(nctx)
            allnat.append(time.perf_counter() - t0)
            allnat_cpu.append(_children_cpu() - c0)
            bad += _failed(files)
            actx = cap.CaptureContext(s, scratch, os.path.join(base, "anchor%d" % i), ranks)
            c0 = _children_cpu()
            t0 = time.perf_counter()
            files = [pyspy_rank(actx, rp) for rp in ranks.values()]
            anchor.append(time.perf_counter() - t0)
            pyspy_cpu.append((_children_cpu() - c0) / len(ranks))
            bad += _failed(files)
            print("rep %d: ours %.2f s (on-demand dumps %.2f s + plan %.2f s + py-spy in parallel %.2f s, "
                  "%.2f s CPU; "
                  "--native for ranks %s, suspects %s with native frames: %s)   anchor all --native in "
                  "parallel %.2f s (%.2f s CPU)   anchor sequential --native %.2f s   problems: %s"
                  % (i + 1, ours[-1], dumps_s[-1], plan_s[-1], ours[-1] - dumps_s[-1] - plan_s[-1],
                     ours_cpu[-1], natives, sus, suspects_native[-1], allnat[-1], allnat_cpu[-1], anchor[-1],
                     (ctx.problems + nctx.problems + actx.problems) or "none"))
        full = cap.capture(cap.CaptureContext(s, scratch, os.path.join(base, "full"), ranks))
        med, amed = statistics.median(ours), statistics.median(anchor)
        print("ours:   median %.2f s, max %.2f s (dumps + parallel py-spy --native of %d ranks)" % (med, max(ours), a.ranks))
        print("anchor: median %.2f s, max %.2f s (sequential py-spy --native)" % (amed, max(anchor)))
        print("anchor: median %.2f s (every rank --native in parallel, after the same dumps: %.2f s)"
              % (statistics.median(allnat), statistics.median(allnat) + statistics.median(dumps_s)))
        print("ratio sequential/ours: %.1fx; all-native-parallel/ours (py-spy step): %.1fx"
              % (amed / max(med, 1e-9), statistics.median(allnat) /
                 max(med - statistics.median(dumps_s) - statistics.median(plan_s), 1e-9)))
        ncores = os.cpu_count() or 1
        print("py-spy CPU: ours %.2f s, all --native %.2f s (median; ratio %.1fx); on %d idle cores "
              "ours needs >= %.2f s wall for py-spy, plus the dumps and the plan (%.2f s): %.2f s"
              % (statistics.median(ours_cpu), statistics.median(allnat_cpu),
                 statistics.median(allnat_cpu) / max(statistics.median(ours_cpu), 1e-9), ncores,
                 statistics.median(ours_cpu) / ncores,
                 statistics.median(dumps_s) + statistics.median(plan_s),
                 statistics.median(ours_cpu) / ncores + statistics.median(dumps_s) + statistics.median(plan_s)))
        cpu1 = statistics.median(pyspy_cpu)
        print("one py-spy dump --native costs %.2f s CPU (median); %d of them on %d cores need >= %.2f s wall"
              % (cpu1, a.ranks, os.cpu_count() or 1, cpu1 * a.ranks / (os.cpu_count() or 1)))
        print("full capture() with hooks (Flight Recorder, nvidia-smi, ncclras) and the copy: %.2f s, %d files, "
              "problems: %s" % (full.seconds, len(full.files), full.problems or "none"))
        print("target <= %.1f s wall with the suspects' native stacks: %s (median %.2f s, max %.2f s; "
              "suspects' native frames present in %d of %d reps)"
              % (TARGET_S, "met" if max(ours) <= TARGET_S and all(suspects_native) else "NOT met", med,
                 max(ours), sum(suspects_native), len(suspects_native)))
        if bad:
            print("py-spy FAILED on %d dump(s): %s" % (len(bad), bad[:4]))
        return 1 if bad else 0
    finally:
        _jobs.kill_job(job)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
