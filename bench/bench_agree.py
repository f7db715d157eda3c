"""Overhead of @collective and of torch.distributed auto check-in (prints figures).

    python bench/bench_agree.py [--calls N] [--no-torch]

Per call, median of several repeats (ns of process CPU time):
  1. an undecorated function call (the baseline);
  2. the same function under @collective, watchdog NOT armed (one attribute test);
  3. the same under @collective, watchdog armed (adds checkpoint(): heartbeat
     stores into an mmap, no system call); checkpoint() alone for reference;
  4. auto check-in: the wrapper alone around a no-op with all_reduce's
     signature, and around a real 1-rank gloo all_reduce of 4 floats
     (wrapped vs the original function, both with the watchdog armed).
The watchdog is armed in this process with a 1-hour period, so no dump fires.
Figures are from a shared 2-core machine: compare ratios, not absolute times.
"""
import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (ROOT, HERE, os.path.join(ROOT, "hpc_hangkit", "boot")):
    if p not in sys.path:
        sys.path.insert(0, p)

from _util import load_note  # noqa: E402


def per_call_ns(fn, calls, repeat=7):
    """Median over ``repeat`` runs of ``calls`` calls of ``fn()``, in ns of this
    process's CPU time per call (CPU time, so that waiting for a core on a
    shared machine is not counted)."""
    times = timeit.repeat(fn, number=calls, repeat=repeat, timer=time.process_time)
    return statistics.median(times) / calls * 1e9


def row(name, ns, base=None):
    extra = "" if base is None else "   x%.2f of baseline, +%.0f ns" % (ns / base, ns - base)
    print("  %-58s %9.0f ns%s" % (name, ns, extra))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200000, help="calls per repeat for the Python-only rows")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch.distributed rows")
    args = ap.parse_args()
    for k in [k for k in os.environ if k.startswith("HANGKIT_")]:
        del os.environ[k]

    from hpc_hangkit.arm import watchdog
    from hpc_hangkit.arm.agree import collective

    def plain(x):
        return x

    decorated = collective(plain)
    n = args.calls
    print("bench_agree: @collective and auto check-in overhead (%s; Python %s)"
          % (load_note(), sys.version.split()[0]))

    assert not watchdog.is_watching()
    base = per_call_ns(lambda: plain(1), n)
    disarmed = per_call_ns(lambda: decorated(1), n)

    scratch = tempfile.mkdtemp(prefix="bench_agree.")
    watchdog.watch(os.path.join(scratch, "rank_0.log"), period_s=3600)
    try:
        armed = per_call_ns(lambda: decorated(1), n)
        cp = watchdog.checkpoint
        cp_ns = per_call_ns(lambda: cp("entering plain() [collective]"), n)
        print("@collective (a function returning its argument):")
        row("undecorated call", base)
        row("@collective, watchdog not armed", disarmed, base)
        row("@collective, watchdog armed", armed, base)
        row("checkpoint(label) alone, armed (reference)", cp_ns)
        if not args.no_torch:
            bench_torch(n, cp)
    finally:
        watchdog.unwatch()


def bench_torch(n, cp):
    import _hangkit_autocheckin as ac
    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        # the wrapper alone, around a no-op with all_reduce's signature
        def noop(tensor, op=None, group=None, async_op=False):
            return None

        wrapped_noop = ac._wrap(dist, "all_reduce", noop, False, 2, None, -1)
        ac._checkpoint = cp
        t = torch.ones(4)
        base = per_call_ns(lambda: noop(t), n)
        wrap = per_call_ns(lambda: wrapped_noop(t), n)
        print("auto check-in, per collective (watchdog armed):")
        row("no-op with all_reduce's signature", base)
        row("same, auto check-in wrapper", wrap, base)

        # a real collective: 1-rank gloo all_reduce of 4 floats
        ac.arm(os.environ, checkpoint=cp)  # torch.distributed already loaded: wraps now
        wrapped = dist.all_reduce
        original = wrapped._hangkit_original
        m = max(2000, n // 50)
        for _ in range(200):
            wrapped(t)
        orig_ns = per_call_ns(lambda: original(t), m)
        wrap_ns = per_call_ns(lambda: wrapped(t), m)
        row("gloo all_reduce (1 rank, 4 floats), original", orig_ns)
        row("gloo all_reduce, auto check-in", wrap_ns, orig_ns)
        ac.disarm()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
