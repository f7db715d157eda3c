"""Figure 3: the roll call at scale, and through per-node summaries.

Synthetic but realistic dumps (bench/gen_dumps.py: real sample blocks, deep chains,
several threads, start-up samples, 3 divergent ranks) at 1k / 10k / 100k ranks x 5
samples. For each size, each in a fresh child process on the same files:

- ours: ``hpc_hangkit.rollcall.report_from_dir`` (parse, positions, verdict, sections);
- anchor: the seed's roll call (bench/anchors.py: regex, one-frame grouping) - the cost floor;
- read only: reading every byte, nothing else.

Prints wall time, peak RSS (ru_maxrss of the child), the ratio ours/anchor, the
growth exponent (log-log slope of time over ranks), and checks that the suspects are
the divergent ranks. Then 12.5k nodes x 8 ranks through node summaries: JSON load,
``merge`` and ``build_report`` times.

Targets: 100k ranks <= 10 s and <= 1 GiB; growth close to linear; merge <= 2 s.

    python bench/bench_rollcall.py [--sizes 1000,10000,100000] [--nodes 12500] [--keep DIR] [--quick]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _util  # noqa: E402
import gen_dumps  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--nodes", type=int, default=12500)
    ap.add_argument("--per-node", type=int, default=8)
    ap.add_argument("--keep", help="directory to keep/reuse the generated dumps in")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    a = ap.parse_args(argv)
    sizes = [100, 300] if a.quick else [int(x) for x in a.sizes.split(",")]
    nodes = 50 if a.quick else a.nodes
    print("bench_rollcall: %s" % _util.load_note())
    base = a.keep or tempfile.mkdtemp(prefix="hk_bench_rollcall_")
    t = gen_dumps.Templates()
    rows = []
    ok = True
    try:
        print("%8s %8s | %7s %7s %8s | %7s %7s %8s | %6s | %9s | %s" % (
            "ranks", "MiB", "ours s", "cpu s", "ours MiB", "seed s", "cpu s", "seed MiB", "read s",
            "cpu ratio", "verdict, suspects"))
        for n in sizes:
            d = os.path.join(base, "r%d" % n)
            marker = os.path.join(d, "expect.json")
            if os.path.exists(marker):
                with open(marker) as fh:
                    exp = json.load(fh)
            else:
                shutil.rmtree(d, ignore_errors=True)
                t0 = time.perf_counter()
                sus, total = gen_dumps.generate(d, n, 5, 3, templates=t)
                exp = {"suspects": sus, "bytes": total, "gen_s": time.perf_counter() - t0}
                with open(marker + ".tmp", "w") as fh:
                    json.dump(exp, fh)
                os.rename(marker + ".tmp", marker)
            dd = os.path.join(d, "watchdog")
            rd = _util.run_child("read_only", dd)
            ours = _util.run_child("rollcall", dd)
            seed = _util.run_child("seed_rollcall", dd)
            good = ours["suspects"] == exp["suspects"]
            ok = ok and good
            rows.append((n, ours["wall_s"], ours["maxrss_bytes"], seed["wall_s"], ours["cpu_s"], seed["cpu_s"]))
            print("%8d %8.1f | %7.2f %7.2f %8.0f | %7.2f %7.2f %8.0f | %6.2f | %9.2f | %s %s" % (
                n, exp["bytes"] / 2**20, ours["wall_s"], ours["cpu_s"], ours["maxrss_bytes"] / 2**20,
                seed["wall_s"], seed["cpu_s"], seed["maxrss_bytes"] / 2**20, rd["wall_s"],
                ours["cpu_s"] / seed["cpu_s"],
                ours["verdict"], "ok" if good else "WRONG %s != %s" % (ours["suspects"], exp["suspects"])))
            sys.stdout.flush()
        if len(rows) >= 2:
            xs = [r[0] for r in rows]
            print("growth exponent (log-log slope over ranks): ours wall %.2f cpu %.2f, seed wall %.2f cpu %.2f; "
                  "ours peak memory %.2f" % (
                      _util.loglog_slope(xs, [r[1] for r in rows]), _util.loglog_slope(xs, [r[4] for r in rows]),
                      _util.loglog_slope(xs, [r[3] for r in rows]), _util.loglog_slope(xs, [r[5] for r in rows]),
                      _util.loglog_slope(xs, [r[2] for r in rows])))
        big = rows[-1]
        print("largest: %d ranks in %.2f s wall, %.2f s cpu (target <= 10 s: %s), peak %.0f MiB "
              "(target <= 1024: %s)" % (
            big[0], big[1], big[4], "met" if big[1] <= 10 else "MISSED", big[2] / 2**20,
            "met" if big[2] <= 2**30 else "MISSED"))
        m = _util.run_child("merge", nodes, a.per_node)
        good = m["suspects"] == m["expect"]
        ok = ok and good
        print("node summaries: %d nodes x %d ranks (%.1f MiB of JSON): load %.2f s, merge %.2f s "
              "(target <= 2 s: %s), report %.2f s, whole child cpu %.2f s, peak %.0f MiB; %s %s" % (
                  nodes, a.per_node, m["summary_bytes"] / 2**20, m["load_s"], m["merge_s"],
                  "met" if m["merge_s"] <= 2 else "MISSED", m["report_s"], m["cpu_s"], m["maxrss_bytes"] / 2**20,
                  m["verdict"], "suspects ok" if good else "WRONG suspects %s" % m["suspects"]))
        if rows and rows[-1][0] == nodes * a.per_node:
            print("ratio merge+report / raw roll call at the same size: %.3f" % (
                (m["merge_s"] + m["report_s"]) / rows[-1][1]))
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
