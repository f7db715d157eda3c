"""What arming costs the training job: step time of a 4-rank gloo loop armed vs unarmed, as a ratio.

    python bench/bench_train_cost.py [--ranks 4] [--rounds 2] [--reps 10] [--steps 10]
                                     [--allreduces 50] [--quick]

A real 4-rank ``torch.distributed`` gloo job (CPU) runs a training-like loop: every step is a
small matmul and ``--allreduces`` all_reduces of 16 floats (the many small collectives a
model with many parameter buckets issues); ``--reps`` repetitions of ``--steps`` steps, each
repetition timed by rank 0 after a barrier (wall and process CPU per step).

- **armed**: the job environment of ``Settings.to_env`` in observe mode with the default
  settings, so ``auto_checkin`` on (sitecustomize arms the faulthandler watchdog and the
  heartbeat, every torch.distributed collective is wrapped to check in, and the
  Flight Recorder records ``flight_recorder_buffer`` entries);
- **armed, no Flight Recorder**: the same with ``flight_recorder_buffer = 0`` (what the
  watchdog, heartbeat and auto check-in cost without torch's own recording);
- **unarmed** (the anchor): the same job with ``mode = off`` (no arming at all).

The three alternate (unarmed, armed, armed without FR, unarmed, ...) ``--rounds`` times, so drift of a
shared machine hits both; the figure is median armed step time / median unarmed step time
over all ``rounds * reps`` repetitions (20 by default), and the same for CPU per step.
Also printed: ns per wrapped collective (auto check-in's wrapper, the same all_reduce
wrapped vs the original in one process: ``bench_agree.py`` measures it in detail).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import _jobs  # noqa: E402
import _util  # noqa: E402

TARGET = 1.01

LOOP = r'''
import json, os, sys, time
import torch
import torch.distributed as dist

reps, steps, nar = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
w = torch.randn(64, 64)
bufs = [torch.zeros(16) for _ in range(nar)]
wrapped = getattr(dist.all_reduce, "_hangkit_original", None) is not None   # auto check-in's mark
out = []
for r in range(reps + 1):                 # the first repetition warms up and is dropped
    dist.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for s in range(steps):
        x = torch.tanh(w @ w)             # a little compute per step
        for b in bufs:
            b.fill_(float(s))
            dist.all_reduce(b)
    t1, c1 = time.perf_counter(), time.process_time()
    if r:
        out.append(((t1 - t0) / steps, (c1 - c0) / steps))
dist.barrier()
if rank == 0:
    print("RESULT " + json.dumps({"steps": out, "wrapped": wrapped}), flush=True)
dist.destroy_process_group()
'''

WRAP_NS = r'''
import os, statistics, sys, time, timeit
import torch
import torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
dist.init_process_group("gloo", rank=0, world_size=1)
b = torch.zeros(16)
f = dist.all_reduce
orig = getattr(f, "_hangkit_original", None)   # auto check-in's mark: the original function
if orig is None:
    print("NOT WRAPPED"); sys.exit(0)
n = int(sys.argv[1])
a = [timeit.timeit(lambda: f(b), number=n, timer=time.process_time) / n * 1e9 for _ in range(5)]
o = [timeit.timeit(lambda: orig(b), number=n, timer=time.process_time) / n * 1e9 for _ in range(5)]
print("WRAP %.0f %.0f" % (statistics.median(a), statistics.median(o)))
'''


def run_job(script, ranks, env, args, timeout):
    port = _jobs.free_port()
    procs = []
    for r in range(ranks):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, script] + [str(x) for x in args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                                      start_new_session=True))
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (o, e) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError("rank exited %s: %s" % (p.returncode, e.decode(errors="replace")[-1500:]))
    for line in outs[0][0].decode().splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError("no result from rank 0: %s" % outs[0][1].decode(errors="replace")[-1500:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10, help="repetitions per job launch")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--allreduces", type=int, default=50, help="small all_reduces per step")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--quick", action="store_true", help="2 ranks, 1 round of 2 repetitions (smoke test)")
    a = ap.parse_args(argv)
    _jobs.exit_on_sigterm()
    if a.quick:
        a.ranks, a.rounds, a.reps, a.steps, a.allreduces = 2, 1, 2, 3, 10
    print("bench_train_cost: %d-rank gloo loop, %d all_reduces of 16 floats per step, %d steps per "
          "repetition, %d x %d repetitions per side; target armed/unarmed <= %.2f; %s"
          % (a.ranks, a.allreduces, a.steps, a.rounds, a.reps, TARGET, _util.load_note()))
    base = tempfile.mkdtemp(prefix="hk_traincost_")
    try:
        script = os.path.join(base, "loop.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(LOOP))
        clean = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
        clean["PYTHONPATH"] = ROOT
        # armed: the defaults (observe, auto check-in on, Flight Recorder on), no override
        sides = {"unarmed": dict(mode="off"), "armed": dict(),
                 "armed-noFR": dict(flight_recorder_buffer=0)}
        res = {k: [] for k in sides}
        for rnd in range(a.rounds):
            for side, ov in sides.items():
                scratch = os.path.join(base, "%s%d" % (side, rnd))
                os.makedirs(scratch)
                s = _jobs.settings(**ov)
                env = s.to_env(scratch, base_env=clean)
                got = run_job(script, a.ranks, env, (a.reps, a.steps, a.allreduces), a.timeout)
                if (side != "unarmed") != bool(got["wrapped"]):
                    raise RuntimeError("%s job: all_reduce wrapped=%s" % (side, got["wrapped"]))
                res[side] += got["steps"]
                print("round %d %-10s step wall median %.2f ms, CPU %.2f ms (rank 0, %d repetitions)"
                      % (rnd + 1, side, 1e3 * statistics.median(x[0] for x in got["steps"]),
                         1e3 * statistics.median(x[1] for x in got["steps"]), len(got["steps"])))
        wu = statistics.median(x[0] for x in res["unarmed"])
        cu = statistics.median(x[1] for x in res["unarmed"])
        for side in ("armed", "armed-noFR"):
            wa = statistics.median(x[0] for x in res[side])
            ca = statistics.median(x[1] for x in res[side])
            print("%-10s step wall time %.2f ms / unarmed %.2f ms = %.3f; rank 0 CPU %.2f ms / %.2f ms = %.3f "
                  "(%+.1f us CPU per all_reduce; %d repetitions each)"
                  % (side, 1e3 * wa, 1e3 * wu, wa / wu, 1e3 * ca, 1e3 * cu, ca / cu,
                     (ca - cu) / a.allreduces * 1e6, len(res[side])))
        wa = statistics.median(x[0] for x in res["armed"])
        wscript = os.path.join(base, "wrapns.py")
        with open(wscript, "w") as f:
            f.write(textwrap.dedent(WRAP_NS))
        s = _jobs.settings()
        env = dict(s.to_env(os.path.join(base, "wrapns"), base_env=clean), RANK="0", WORLD_SIZE="1",
                   MASTER_PORT=str(_jobs.free_port()))
        os.makedirs(os.path.join(base, "wrapns"))
        p = subprocess.run([sys.executable, wscript, "2000" if not a.quick else "200"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, cwd=ROOT)
        line = [ln for ln in p.stdout.decode().splitlines() if ln.startswith(("WRAP", "NOT"))]
        if line and line[0].startswith("WRAP"):
            wr, og = (float(x) for x in line[0].split()[1:])
            print("auto check-in wrapper: %.0f ns CPU per wrapped 1-rank all_reduce vs %.0f ns unwrapped: "
                  "%+.0f ns per collective" % (wr, og, wr - og))
        else:
            print("auto check-in wrapper: not measured (%s)" % (line or p.stderr.decode()[-300:]))
        print("target armed/unarmed step time <= %.2f: %s (%.3f)" % (TARGET, "met" if wa / wu <= TARGET
                                                                       else "NOT met", wa / wu))
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
