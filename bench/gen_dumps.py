"""Generate synthetic but realistic watchdog dumps for the roll-call benchmarks.

Every block is cut from a REAL sample (tests/fixtures/torch_samples/gloo_divergent_barrier:
a 4-rank gloo job where rank 1 skipped an ``all_reduce`` and called ``barrier``); the
generator only multiplies and deepens them:

- deep call chains: the real ``all_reduce`` / ``barrier`` chains with a Lightning-style
  training loop (``DEPTH`` extra frames) inserted between ``train`` and ``<module>``;
- several threads: one rank in five is written in the ``dump_traceback_later`` shape of
  the samples (``Timeout (0:00:03)!`` + a ``fr-sigwait`` helper thread + a data-loader
  thread + the main thread last); the others in the shape the hpc-hangkit watchdog writes
  (header line, then one ``Stack (most recent call first):`` block per dump);
- start-up samples: every rank starts with the real ``import torch`` dump;
- a few divergent ranks (default 3, spread over the world) wait in ``barrier``;
- one rank in twenty has one of its samples caught mid-transition (a forward pass).

Usage::

    python bench/gen_dumps.py OUT --ranks 1000 [--samples 5] [--divergent 3]

writes ``OUT/watchdog/rank_<r>.pid<pid>.log`` and prints the expected suspects as JSON.
:func:`node_summaries` builds per-node summaries (8 ranks per node) without
writing 100k files: it summarises a few real 8-rank node templates with
``hpc_hangkit.rollcall.summarize_node`` and relabels their ranks;
:func:`write_node_summaries` writes them one file per node (125k files for 1M ranks).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SAMPLES = os.path.join(ROOT, "tests", "fixtures", "torch_samples", "gloo_divergent_barrier", "faulthandler")
DEPTH = 24
TIMEOUT = "Timeout (0:00:03)!\n"
STACK = "Stack (most recent call first):\n"
_SITE = "/home/user/hangdemo/venv/lib/python3.11/site-packages/"

_LOOP = [  # outermost last, like faulthandler prints them (innermost first)
    ("lightning/pytorch/core/module.py", 1306, "optimizer_step"),
    ("lightning/pytorch/core/optimizer.py", 153, "step"),
    ("lightning/pytorch/strategies/ddp.py", 270, "optimizer_step"),
    ("lightning/pytorch/strategies/strategy.py", 238, "optimizer_step"),
    ("lightning/pytorch/plugins/precision/precision.py", 122, "optimizer_step"),
    ("lightning/pytorch/loops/optimization/automatic.py", 270, "_optimizer_step"),
    ("lightning/pytorch/loops/optimization/automatic.py", 192, "run"),
    ("lightning/pytorch/loops/training_epoch_loop.py", 318, "advance"),
    ("lightning/pytorch/loops/training_epoch_loop.py", 152, "run"),
    ("lightning/pytorch/loops/fit_loop.py", 406, "advance"),
    ("lightning/pytorch/loops/fit_loop.py", 205, "run"),
    ("lightning/pytorch/trainer/trainer.py", 1025, "_run_stage"),
    ("lightning/pytorch/trainer/trainer.py", 981, "_run"),
    ("lightning/pytorch/trainer/trainer.py", 575, "_fit_impl"),
    ("lightning/pytorch/trainer/call.py", 48, "_call_and_handle_interrupt"),
    ("lightning/pytorch/trainer/trainer.py", 539, "fit"),
]
_FORWARD = ["  File \"%storch/nn/modules/linear.py\", line 125 in forward\n" % _SITE,
            "  File \"%storch/nn/modules/module.py\", line 1784 in _call_impl\n" % _SITE,
            "  File \"%storch/nn/modules/module.py\", line 1773 in _wrapped_call_impl\n" % _SITE]
_LOADER = ("Thread 0x00007f36a0c1a6c0 (most recent call first):\n"
           "  File \"/usr/local/python3.11/lib/python3.11/threading.py\", line 331 in wait\n"
           "  File \"/usr/local/python3.11/lib/python3.11/queue.py\", line 180 in get\n"
           "  File \"%storch/utils/data/_utils/pin_memory.py\", line 54 in do_one_step\n"
           "  File \"%storch/utils/data/_utils/pin_memory.py\", line 78 in _pin_memory_loop\n"
           "  File \"/usr/local/python3.11/lib/python3.11/threading.py\", line 982 in run\n"
           "  File \"/usr/local/python3.11/lib/python3.11/threading.py\", line 1045 in _bootstrap_inner\n"
           "  File \"/usr/local/python3.11/lib/python3.11/threading.py\", line 1002 in _bootstrap\n\n"
           % (_SITE, _SITE))


def _blocks(path):
    with open(path) as fh:
        text = fh.read()
    return [b for b in text.split(TIMEOUT)[1:]]


class Templates:
    """The real blocks, cut once from the samples."""

    def __init__(self, samples_dir=SAMPLES, depth=DEPTH):
        b0 = _blocks(os.path.join(samples_dir, "rank_0.log"))
        b1 = _blocks(os.path.join(samples_dir, "rank_1.log"))
        self.startup = b0[0].split("\n", 1)[1]           # frames of the import-in-progress dump
        hang0, hang1 = b0[-1], b1[-1]
        helper, main0 = hang0.split("\n\n", 1)
        _, main1 = hang1.split("\n\n", 1)
        self.helper = helper + "\n\n"                     # "Thread 0x...\n  File ...\n"
        self.main_thread_line0 = main0.split("\n", 1)[0] + "\n"
        self.allreduce = self._deepen(main0.split("\n", 1)[1], depth)
        self.barrier = self._deepen(main1.split("\n", 1)[1], depth)
        fr = self.allreduce.split("\n")
        # mid-transition: in a forward pass instead of the collective
        i = next(i for i, l in enumerate(fr) if "sync_grads" in l)
        self.forward = "".join(_FORWARD) + "\n".join(fr[i + 1:])

    @staticmethod
    def _deepen(frames, depth):
        lines = [l for l in frames.split("\n") if l.strip()]
        mod = lines[-1]                                   # <module>
        extra = ["  File \"%s%s\", line %d in %s" % (_SITE, f, ln, fn)
                 for f, ln, fn in (_LOOP * (depth // len(_LOOP) + 1))[:depth]]
        return "\n".join(lines[:-1] + extra + [mod]) + "\n"


def divergent_ranks(world, n):
    """``n`` ranks spread over the world (never rank 0): the expected suspects."""
    if n <= 0 or world < 2:
        return []
    step = max(1, world // (n + 1))
    return sorted({min(world - 1, step * (i + 1)) for i in range(n)})


def rank_log(t, rank, world, samples, divergent, pid=None):
    """The bytes of one rank's watchdog log."""
    pid = pid if pid is not None else 100000 + rank
    threads = rank % 5 == 0
    main = t.barrier if divergent else t.allreduce
    out = ["# hpc-hangkit rank=%d world=%d local_rank=%d pid=%d host=node%05d t=1796069575.083 "
           "signal=SIGURG period_s=30.0 argv=[\"/home/user/hangdemo/jobs/train.py\"]\n"
           % (rank, world, rank % 8, pid, rank // 8)]
    if threads:
        out.append(TIMEOUT + t.main_thread_line0 + t.startup)
    else:
        out.append(STACK + t.startup)
    for i in range(samples):
        chain = t.forward if (rank % 20 == 7 and i == samples - 2) else main
        if threads:
            out.append(TIMEOUT + t.helper + _LOADER + t.main_thread_line0 + chain)
        else:
            out.append(STACK + chain)
    return "".join(out).encode()


def generate(out, ranks, samples=5, n_divergent=3, templates=None):
    """Write ``ranks`` watchdog logs under ``out/watchdog``; return (suspects, total bytes)."""
    t = templates or Templates()
    d = os.path.join(out, "watchdog")
    os.makedirs(d, exist_ok=True)
    div = set(divergent_ranks(ranks, n_divergent))
    total = 0
    for r in range(ranks):
        data = rank_log(t, r, ranks, samples, r in div)
        total += len(data)
        with open(os.path.join(d, "rank_%d.pid%d.log" % (r, 100000 + r)), "wb") as fh:
            fh.write(data)
    return sorted(div), total


def node_summaries(nodes, per_node=8, samples=5, n_divergent=3, templates=None):
    """Per-node summaries for ``nodes`` x ``per_node`` ranks, as the epilog would
    write them, built from real summaries of 8-rank node templates with ranks relabelled.

    Returns (summaries, suspects). Two templates: an all-waiting node and one with
    a divergent rank; each summarised from parsed dumps by ``summarize_node``.
    """
    from hpc_hangkit.parse.faulthandler import parse_faulthandler
    from hpc_hangkit.ranges import format_ranks, parse_ranks
    from hpc_hangkit.rollcall import summarize_node

    t = templates or Templates()
    world = nodes * per_node
    div = set(divergent_ranks(world, n_divergent))
    cache = {}

    def template(div_locals, threads_mod):
        key = (tuple(sorted(div_locals)), threads_mod)
        if key not in cache:
            logs = []
            for lr in range(per_node):
                # keep the rank's shape (threads / mid-transition) by choosing a representative rank
                rr = threads_mod * 0 + lr
                lg = parse_faulthandler(rank_log(t, rr, world, samples, lr in div_locals),
                                        "rank_%d.log" % lr)
                lg.rank = lr
                logs.append(lg)
            cache[key] = json.dumps(summarize_node(logs, samples=samples, world_size=world))
        return cache[key]

    out = []
    for n in range(nodes):
        base = n * per_node
        dl = [r - base for r in div if base <= r < base + per_node]
        s = json.loads(template(dl, 0))
        for p in s["positions"]:
            p["ranks"] = format_ranks([r + base for r in parse_ranks(p["ranks"])])
        s["facts"] = {str(int(k) + base): v for k, v in s["facts"].items()}
        for v in s["facts"].values():
            if "host" in v:
                v["host"] = "node%05d" % n
            if "pid" in v:
                v["pid"] = 100000 + base
        s["hosts"] = ["node%05d" % n]
        out.append(s)
    return out, sorted(div)


def iter_node_summaries(nodes, per_node=8, samples=5, n_divergent=3, templates=None):
    """Like :func:`node_summaries`, one node at a time: yields ``(node index, summary)``;
    the summaries share their (read-only) chains table, so a million ranks are never in
    memory at once. Suspects: ``divergent_ranks(nodes * per_node, n_divergent)``."""
    from hpc_hangkit.parse.faulthandler import parse_faulthandler
    from hpc_hangkit.ranges import format_ranks, parse_ranks
    from hpc_hangkit.rollcall import summarize_node

    t = templates or Templates()
    world = nodes * per_node
    div = divergent_ranks(world, n_divergent)
    cache = {}
    for n in range(nodes):
        base = n * per_node
        dl = tuple(r - base for r in div if base <= r < base + per_node)
        tpl = cache.get(dl)
        if tpl is None:
            logs = []
            for lr in range(per_node):
                lg = parse_faulthandler(rank_log(t, lr, world, samples, lr in dl), "rank_%d.log" % lr)
                lg.rank = lr
                logs.append(lg)
            s = summarize_node(logs, samples=samples, world_size=world)
            tpl = cache[dl] = (s, [(p, parse_ranks(p["ranks"])) for p in s["positions"]],
                               [(int(k), v) for k, v in s["facts"].items()])
        s, pos, facts = tpl
        host = "node%05d" % n
        out = dict(s)
        out["positions"] = [dict(p, ranks=format_ranks([r + base for r in rs])) for p, rs in pos]
        fo = {}
        for lr, v in facts:
            v = dict(v)
            if "host" in v:
                v["host"] = host
            if "pid" in v:
                v["pid"] = 100000 + base + lr
            fo[str(lr + base)] = v
        out["facts"] = fo
        out["hosts"] = [host]
        yield n, out


def write_node_summaries(out, nodes, per_node=8, samples=5, n_divergent=3, templates=None):
    """Write ``out/nodes/n<index>.summary.json`` for ``nodes`` x ``per_node`` ranks (what the
    epilogs would store); returns (paths, suspects, total bytes)."""
    d = os.path.join(out, "nodes")
    os.makedirs(d, exist_ok=True)
    paths = []
    total = 0
    for n, s in iter_node_summaries(nodes, per_node, samples, n_divergent, templates):
        data = json.dumps(s, separators=(",", ":"))
        p = os.path.join(d, "n%06d.summary.json" % n)
        with open(p, "w") as fh:
            fh.write(data)
        total += len(data)
        paths.append(p)
    return paths, divergent_ranks(nodes * per_node, n_divergent), total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--divergent", type=int, default=3)
    a = ap.parse_args(argv)
    sus, total = generate(a.out, a.ranks, a.samples, a.divergent)
    print(json.dumps({"ranks": a.ranks, "bytes": total, "suspects": sus}))


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
