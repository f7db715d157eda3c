"""Figure 11: the HTML report (hpc_hangkit/report/html.py) at 1k, 4k and 100k ranks.

Each job's roll call comes from node summaries (bench/gen_dumps.node_summaries: real
8-rank node summaries, ranks relabelled, 3 divergent ranks), merged and reported as the
collector would (``merge``, ``build_report``). Three timelines per size: ``shared`` (ranks
share their last-write times, as dumps taken in one capture do), ``spread`` (each rank its
own time within 100 s, as tests/report/html_cases.big_report(jitter=True)) and ``distinct``
(rank r at r x 0.1 s: no two ranks share a time even at the page's 0.1 s resolution, the
per-rank table's worst case, one row per rank in the page's JSON).

For each page: the render in Python (``render_html``), the file size, and in a real
headless Chromium (Debian's ``chromium`` through Playwright's ``executable_path``; a new
context each repetition, page opened from ``file://``):

- load: navigation start to the ``load`` event (parse, style, the page's script);
- ready: navigation start to the second animation frame after ``load`` (laid out and
  painted; measured in the page, ``performance.now()``);
- filter: one rank typed into the filter, to its second animation frame (the script's
  whole work: hide groups, list the rank's row).

Anchor, in the same browser and run: the naive page, one table row per rank (rank, state,
group), which the report avoids. Prints medians of ``--reps`` and the ratio ready/anchor.

Targets: 4,096 ranks ready in < 2 s; the page < 5 MB at 100k ranks (every timeline).

    python bench/bench_html.py [--sizes 1000,4096,100000] [--reps 3] [--quick]
"""
import argparse
import html as _html
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import _util  # noqa: E402
import gen_dumps  # noqa: E402

_READY_JS = """() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => {
  const n = performance.getEntriesByType("navigation")[0];
  r([n.loadEventEnd, performance.now()]);
})))"""

_FILTER_JS = """async (rank) => {
  const i = document.getElementById("rank-filter");
  const t0 = performance.now();
  i.value = String(rank);
  i.dispatchEvent(new Event("input"));
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return [performance.now() - t0, document.getElementById("rank-rows").rows.length];
}"""


MODES = ("shared", "spread", "distinct")
_NOW = 1796095400.0


def report_of(ranks, mode, per_node=8):
    """(Report, suspects) of ``ranks`` ranks from node summaries; ``mode``: one of :data:`MODES`."""
    from hpc_hangkit.rollcall import build_report, merge

    sums, suspects = gen_dumps.node_summaries(ranks // per_node, per_node)
    for s in sums:
        for r, f in s["facts"].items():
            if mode == "spread":
                f["last_write"] = _NOW - 400.0 + (int(r) * 7919 % 100003) / 1000.0
            elif mode == "distinct":
                f["last_write"] = _NOW - 20000.0 + int(r) * 0.1
    return build_report(merge(*sums), now=_NOW), suspects


def naive_page(rep):
    """The anchor: one row per rank (what the report does not do)."""
    from hpc_hangkit.rollcall.prose import short_where

    group_of = {}
    for g in rep.groups:
        where = "%s %s" % (g.role, short_where(g.frame) if g.frame is not None else "")
        for r in g.ranks:
            group_of[r] = where
    rows = "".join("<tr><td>%d</td><td>%s</td><td>%s</td></tr>" % (r, _html.escape(f.state or "-"),
                                                                  _html.escape(group_of.get(r, "-")))
                   for r, f in sorted(rep.ranks.items()))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>naive</title></head><body>"
            "<h1>%s</h1><table><thead><tr><th>rank</th><th>state</th><th>group</th></tr></thead><tbody>%s"
            "</tbody></table></body></html>\n" % (_html.escape(rep.verdict), rows))


def measure(browser, path, reps, rank=None):
    """Median (load ms, ready ms, filter ms or None, wall s) over ``reps`` fresh contexts."""
    loads, readies, filters, walls = [], [], [], []
    for _ in range(reps):
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = ctx.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            t0 = time.perf_counter()
            page.goto("file://" + path, wait_until="load", timeout=600000)
            load, ready = page.evaluate(_READY_JS)
            walls.append(time.perf_counter() - t0)
            loads.append(load)
            readies.append(ready)
            if rank is not None:
                ms, n = page.evaluate(_FILTER_JS, rank)
                if n != 1:
                    raise SystemExit("bench_html: filtering rank %d listed %d rows, not 1" % (rank, n))
                filters.append(ms)
            if errors:
                raise SystemExit("bench_html: page errors: %s" % errors)
        finally:
            ctx.close()
    med = statistics.median
    return med(loads), med(readies), (med(filters) if filters else None), med(walls)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,4096,100000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    a = ap.parse_args(argv)
    sizes = [64, 256] if a.quick else [int(x) for x in a.sizes.split(",")]
    reps = 1 if a.quick else a.reps
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        raise SystemExit("bench_html: no chromium on PATH (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    from hpc_hangkit.report.html import render_html

    print("bench_html: %s; %s" % (_util.load_note(), os.popen("%s --version 2>/dev/null" % chromium).read().strip()))
    tmp = tempfile.mkdtemp(prefix="hk_bench_html_")
    ok = True
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"], timeout=120000)
            try:
                print("%7s %8s | %8s %9s %6s | %8s %8s %9s | %9s %9s | %8s" % (
                    "ranks", "times", "render s", "bytes", "<tr>", "load ms", "ready ms", "filter ms",
                    "naive MB", "naive ms", "ratio"))
                for n in sizes:
                    naive_ms = naive_mb = None
                    for mode in MODES:
                        rep, suspects = report_of(n, mode)
                        t0 = time.perf_counter()
                        page = render_html(rep)
                        render_s = time.perf_counter() - t0
                        path = os.path.join(tmp, "r%d_%s.html" % (n, mode))
                        with open(path, "w") as fh:
                            fh.write(page)
                        size = os.path.getsize(path)
                        load, ready, filt, _ = measure(browser, path, reps, rank=suspects[0])
                        if naive_ms is None:
                            npath = os.path.join(tmp, "naive%d.html" % n)
                            with open(npath, "w") as fh:
                                fh.write(naive_page(rep))
                            naive_mb = os.path.getsize(npath) / 1e6
                            naive_ms = measure(browser, npath, reps)[1]
                        print("%7d %8s | %8.2f %9d %6d | %8.0f %8.0f %9.1f | %9.2f %9.0f | %8.2f" % (
                            n, mode, render_s, size, page.count("<tr"), load, ready, filt,
                            naive_mb, naive_ms, ready / naive_ms if naive_ms else float("nan")))
                        sys.stdout.flush()
                        if n == 4096 and ready >= 2000:
                            print("  MISS: 4,096 ranks ready in %.0f ms (target < 2,000)" % ready)
                            ok = False
                        if n == 100000 and size >= 5 * 1000 * 1000:
                            print("  MISS: 100k ranks page %d bytes (target < 5 MB)" % size)
                            ok = False
            finally:
                browser.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("targets (4,096 ranks ready < 2 s; 100k-rank page < 5 MB): %s" % ("met" if ok else "MISSED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
