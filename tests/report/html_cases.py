"""Pages for the HTML report tests (tests/report/test_html*.py) and bench/bench_html.py.

The three golden cases are built from the fixtures by tests/report/golden.py (its inputs,
fixed clock), then rendered with :func:`hpc_hangkit.report.html.render_html` into
``report.html`` next to the inputs, the way ``hpc-hangkit report DIR --html DIR/report.html``
writes it. Large jobs come from bench/gen_dumps.node_summaries (real 8-rank node
summaries, ranks relabelled), merged and reported as the collector would.
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
for p in (REPO, HERE, os.path.join(REPO, "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)

import golden  # noqa: E402

#: verdict -> golden case: a SPLIT with a readable branch, a GONE, a TOGETHER
CASES = {"SPLIT": "branch_source_readable", "GONE": "gone_primary_with_victim", "TOGETHER": "barrier_together"}
#: the README's picture; rewritten only with HK_REGENERATE_SCREENSHOT=1
README_PICTURE = os.path.join(REPO, "docs", "images", "report.png")


def chromium():
    """Path of the system Chromium (Debian's ``chromium`` package), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def golden_page(verdict, root):
    """Build the golden case for ``verdict`` under ``root``; returns (report.html path, Report)."""
    from hpc_hangkit.report.html import gather_evidence, render_html
    from hpc_hangkit.rollcall import report_from_summary_and_dir, summarize_dir

    case = golden.CASES[CASES[verdict]]
    path = golden.build(case, root)
    summary = summarize_dir(path, world_size=case.world_size, samples=case.samples, workers=1)
    rep = report_from_summary_and_dir(summary, path, depth=case.depth, world_size=case.world_size, now=golden.NOW)
    out = os.path.join(path, "report.html")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(render_html(rep, gather_evidence(path, out, rep)))
    return out, rep


def big_report(ranks, per_node=8, jitter=False):
    """The roll call of ``ranks`` ranks (``ranks // per_node`` node summaries, 3 divergent
    ranks) -> (Report, suspects). ``jitter``: every rank gets its own last-write time
    (the timeline's worst case: no two ranks share their times)."""
    import gen_dumps

    from hpc_hangkit.rollcall import build_report, merge

    sums, suspects = gen_dumps.node_summaries(ranks // per_node, per_node)
    if jitter:
        for s in sums:
            for r, f in s["facts"].items():
                f["last_write"] = 1796095000.0 + (int(r) * 7919 % 100003) / 1000.0
    return build_report(merge(*sums), now=1796095400.0), suspects
