"""Figure 12: the roll call of up to a million ranks (125k nodes x 8) from node summaries.

Node summaries (``*.summary.json``, one file per node of 8 ranks) are written by
bench/gen_dumps.py:write_node_summaries (real 8-rank node templates summarised by
``summarize_node``, ranks relabelled; 3 divergent ranks). At 10k / 100k / 1M ranks, each
measured in a fresh child process (wall, CPU, peak RSS = ru_maxrss of the child):

- flat: ``hpc_hangkit.rollcall.stream.merge_files`` over every node file (one process
  reads 125k files at 1M ranks), then ``build_report``;
- two-level: the node files merged per 1,000 nodes (``write_merged``: the epilog side's
  work, timed per group and not part of the roll call), then ``merge_files`` over the group
  files and ``build_report`` - the roll call proper;
- dir: ``summarize_dir`` of the group directory (what ``hpc-hangkit report`` reads) and
  ``build_report``.

Prints the growth exponents (log-log slope over ranks) and checks the verdict and the
suspects (the divergent ranks). With ``--direct N`` (default 100000), N ranks of raw
watchdog dumps are also written (gen_dumps.generate), the direct roll call run on them, the
same dumps summarised node by node (8 ranks each) and merged: verdict, suspects and the
whole report must be the same.

Targets: 1M ranks <= 10 s wall and <= 2 GiB peak (two-level, on 2 shared cores).

    python bench/bench_rollcall_1m.py [--sizes 10000,100000,1000000] [--direct 100000] [--keep DIR] [--quick]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _util  # noqa: E402
import gen_dumps  # noqa: E402

PER_NODE = 8
GROUP = 1000


def _files(d):
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".summary.json"))


# --- tasks (run in the child) -------------------------------------------------------

def task_groups(d, group):
    from hpc_hangkit.rollcall.stream import write_merged

    paths = _files(os.path.join(d, "nodes"))
    gd = os.path.join(d, "groups")
    os.makedirs(gd, exist_ok=True)
    res = {"each_s": []}

    def fn():
        for g in range(0, len(paths), int(group)):
            t0 = time.perf_counter()
            write_merged(paths[g:g + int(group)], os.path.join(gd, "g%06d.summary.json" % (g // int(group))))
            res["each_s"].append(time.perf_counter() - t0)
        res["bytes"] = sum(os.path.getsize(p) for p in _files(gd))
        return res
    return _measure(fn)


def _verdict(rep):
    return {"verdict": rep.verdict, "suspects": list(rep.suspect_ranks)}


def task_merge(sub):
    from hpc_hangkit.rollcall import build_report
    from hpc_hangkit.rollcall.stream import merge_files

    res = {}

    def fn():
        t0 = time.perf_counter()
        m = merge_files(_files(sub))
        t1 = time.perf_counter()
        rep = build_report(m, now=0.0)
        res.update(_verdict(rep), merge_s=t1 - t0, report_s=time.perf_counter() - t1, files=len(_files(sub)))
        return res
    return _measure(fn)


def task_dir(sub):
    from hpc_hangkit.rollcall import build_report, summarize_dir

    res = {}

    def fn():
        t0 = time.perf_counter()
        m = summarize_dir(sub)
        t1 = time.perf_counter()
        rep = build_report(m, now=0.0)
        res.update(_verdict(rep), merge_s=t1 - t0, report_s=time.perf_counter() - t1)
        return res
    return _measure(fn)


def task_direct(d):
    """The direct roll call over the raw dumps, and the same dumps summarised per node of 8
    ranks, streamed through merge_files: both reports, compared whole."""
    from hpc_hangkit.rollcall import build_report, summarize_dir, summarize_node
    from hpc_hangkit.rollcall.read import read_dir
    from hpc_hangkit.rollcall.stream import merge_files

    res = {}

    def fn():
        t0 = time.perf_counter()
        direct = build_report(summarize_dir(os.path.join(d, "watchdog")), now=0.0)
        t1 = time.perf_counter()
        wd = os.path.join(d, "watchdog")
        names = sorted(os.listdir(wd), key=lambda n: int(n.split("_")[1].split(".")[0]))
        nd = os.path.join(d, "raw_nodes")
        os.makedirs(nd, exist_ok=True)
        for i in range(0, len(names), PER_NODE):
            c = read_dir(wd, [os.path.join(wd, n) for n in names[i:i + PER_NODE]])
            s = summarize_node(c.logs, warnings=c.warnings)
            with open(os.path.join(nd, "n%06d.summary.json" % (i // PER_NODE)), "w") as fh:
                json.dump(s, fh, separators=(",", ":"))
        t2 = time.perf_counter()
        via = build_report(merge_files(_files(nd)), now=0.0)
        t3 = time.perf_counter()
        res.update(_verdict(direct), via=_verdict(via), same_report=via.to_dict() == direct.to_dict(),
                   direct_s=t1 - t0, summarize_s=t2 - t1, via_s=t3 - t2)
        return res
    return _measure(fn)


def _measure(fn):
    import hpc_hangkit.rollcall  # noqa: F401  (imports are not the figure)
    return _util._measure(fn)


def run_child(task, *args, timeout=3600):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", task] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=_util.ROOT)
    if p.returncode != 0:
        raise RuntimeError("child %s %s failed (exit %d): %s" % (task, args, p.returncode,
                                                                  p.stderr.decode()[-2000:]))
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


# --- the figure ---------------------------------------------------------------------

def _prepare(base, ranks, t):
    d = os.path.join(base, "s%d" % ranks)
    marker = os.path.join(d, "expect.json")
    if os.path.exists(marker):
        with open(marker) as fh:
            return d, json.load(fh)
    shutil.rmtree(d, ignore_errors=True)
    t0 = time.perf_counter()
    paths, sus, total = gen_dumps.write_node_summaries(d, ranks // PER_NODE, PER_NODE, templates=t)
    exp = {"suspects": sus, "bytes": total, "files": len(paths), "gen_s": time.perf_counter() - t0}
    g = run_child("groups", d, GROUP)
    exp.update(groups_s=sum(g["each_s"]), group_max_s=max(g["each_s"]), group_n=len(g["each_s"]),
               group_bytes=g["bytes"], group_peak=g["maxrss_bytes"])
    with open(marker + ".tmp", "w") as fh:
        json.dump(exp, fh)
    os.rename(marker + ".tmp", marker)
    return d, exp


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(globals()["task_" + sys.argv[2]](*sys.argv[3:])))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--direct", type=int, default=100000, help="ranks of raw dumps for the direct check (0: none)")
    ap.add_argument("--keep", help="directory to keep/reuse the generated files in")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    a = ap.parse_args(argv)
    sizes = [800, 8000] if a.quick else [int(x) for x in a.sizes.split(",")]
    direct = 400 if a.quick else a.direct
    print("bench_rollcall_1m: %s" % _util.load_note())
    base = a.keep or tempfile.mkdtemp(prefix="hk_bench_rollcall_1m_")
    t = gen_dumps.Templates()
    ok = True
    rows = []
    try:
        print("%8s %7s %7s | %-9s %7s %7s %8s %7s %7s | %s" % (
            "ranks", "files", "MiB", "path", "wall s", "cpu s", "peak MiB", "merge s", "report s", "verdict, suspects"))
        for n in sizes:
            d, exp = _prepare(base, n, t)
            row = {"ranks": n}
            for name, task, sub in (("flat", "merge", os.path.join(d, "nodes")),
                                    ("two-level", "merge", os.path.join(d, "groups")),
                                    ("dir", "dir", os.path.join(d, "groups"))):
                r = run_child(task, sub)
                good = r["suspects"] == exp["suspects"] and r["verdict"] == "SPLIT"
                ok = ok and good
                row[name] = r
                files = exp["files"] if name == "flat" else exp["group_n"]
                mib = (exp["bytes"] if name == "flat" else exp["group_bytes"]) / 2**20
                print("%8d %7d %7.1f | %-9s %7.2f %7.2f %8.0f %7.2f %7.2f | %s %s" % (
                    n, files, mib, name, r["wall_s"], r["cpu_s"], r["maxrss_bytes"] / 2**20, r["merge_s"],
                    r["report_s"], r["verdict"], "ok" if good else "WRONG %s != %s" % (r["suspects"], exp["suspects"])))
                sys.stdout.flush()
            print("%8s %7s %7s | groups of %d nodes (epilog side): %d groups, %.2f s in all, %.2f s the "
                  "slowest, peak %.0f MiB" % ("", "", "", GROUP, exp["group_n"], exp["groups_s"],
                                             exp["group_max_s"], exp["group_peak"] / 2**20))
            rows.append(row)
        if len(rows) >= 2:
            xs = [r["ranks"] for r in rows]
            for name in ("flat", "two-level", "dir"):
                print("growth exponent %-9s wall %.2f cpu %.2f peak memory %.2f" % (
                    name, _util.loglog_slope(xs, [r[name]["wall_s"] for r in rows]),
                    _util.loglog_slope(xs, [r[name]["cpu_s"] for r in rows]),
                    _util.loglog_slope(xs, [r[name]["maxrss_bytes"] for r in rows])))
        big = rows[-1]["two-level"]
        judged = rows[-1]["ranks"] >= 1_000_000  # the targets are for a million ranks

        def verdict(ok):
            return ("met" if ok else "MISSED") if judged else "not judged below 1M ranks"
        print("largest: %d ranks two-level in %.2f s wall, %.2f s cpu (target at 1M <= 10 s: %s), peak %.0f MiB "
              "(target at 1M <= 2048: %s)" % (rows[-1]["ranks"], big["wall_s"], big["cpu_s"],
                                              verdict(big["wall_s"] <= 10), big["maxrss_bytes"] / 2**20,
                                              verdict(big["maxrss_bytes"] <= 2 << 30)))
        if direct:
            d = os.path.join(base, "raw%d" % direct)
            marker = os.path.join(d, "expect.json")
            if not os.path.exists(marker):
                shutil.rmtree(d, ignore_errors=True)
                sus, _ = gen_dumps.generate(d, direct, 5, 3, templates=t)
                with open(marker, "w") as fh:
                    json.dump({"suspects": sus}, fh)
            with open(marker) as fh:
                sus = json.load(fh)["suspects"]
            r = run_child("direct", d)
            good = (r["suspects"] == sus and r["via"] == {"verdict": r["verdict"], "suspects": r["suspects"]}
                    and r["same_report"])
            ok = ok and good
            print("direct check at %d raw ranks: direct roll call %s %s in %.2f s; the same dumps as %d node "
                  "summaries (%.2f s to summarise) streamed: %s %s in %.2f s; whole report %s: %s" % (
                      direct, r["verdict"], r["suspects"], r["direct_s"], direct // PER_NODE, r["summarize_s"],
                      r["via"]["verdict"], r["via"]["suspects"], r["via_s"],
                      "equal" if r["same_report"] else "DIFFERENT", "ok" if good else "WRONG"))
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
