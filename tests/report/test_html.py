"""The HTML report (hpc_hangkit/report/html.py) without a browser: colour contrast, scale,
self-containment, escaping, and the --html options. The browser tests are in
test_html_browser.py."""
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest

import html_cases
from hpc_hangkit.report import html


def test_contrast_ratio_matches_the_wcag_reference_values():
    assert html.contrast_ratio("#000000", "#ffffff") == pytest.approx(21.0)
    assert html.contrast_ratio("#777777", "#777777") == pytest.approx(1.0)
    # WCAG's own example of a just-failing grey: #777777 on white is 4.48:1
    assert html.contrast_ratio("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


@pytest.mark.parametrize("name", sorted(html.PALETTE))
def test_every_colour_pair_passes_wcag_aa(name):
    fg, bg = html.PALETTE[name]
    assert html.contrast_ratio(fg, bg) >= 4.5, (name, fg, bg, html.contrast_ratio(fg, bg))


def test_muted_and_body_text_pass_on_every_background_they_can_sit_on():
    """Muted notes and plain text appear inside coloured rows (suspect, waiting, exited,
    code blocks), so they must pass on each of those backgrounds too."""
    for fg_name in ("muted", "page"):
        fg = html.PALETTE[fg_name][0]
        for name, (_, bg) in html.PALETTE.items():
            if name == "head":   # the dark header holds only its own white text
                continue
            assert html.contrast_ratio(fg, bg) >= 4.5, (fg_name, name, html.contrast_ratio(fg, bg))


def test_the_stylesheet_uses_only_palette_colours_for_text():
    css = html._css()
    fgs = {fg for fg, _ in html.PALETTE.values()}
    used = set(re.findall(r"(?<![-\w])color:(#[0-9a-fA-F]{6})", css))
    assert used and used <= fgs, used - fgs


def _page(rep, ev=None):
    return html.render_html(rep, ev)


def test_4096_ranks_are_grouped_not_one_row_per_rank():
    rep, suspects = html_cases.big_report(4096)
    page = _page(rep)
    assert "suspect ranks %s" % ",".join(map(str, suspects)) in page
    assert page.count("<tr") < 60, page.count("<tr")           # groups, not ranks
    assert page.count("<details") < 100
    assert len(page) < 1 << 20
    data = json.loads(re.search(r'<script type="application/json" id="hk-data">(.*?)</script>', page, re.S)
                      .group(1))
    assert sum(len(r[0].split(",")) for r in data["rows"]) < 50   # ranks sharing their times share a row


def test_per_rank_times_stay_in_one_compact_table():
    """Every rank with its own last-write time: one data row per rank set in the page's
    JSON (for the filter), still no DOM row per rank."""
    rep, _ = html_cases.big_report(4096, jitter=True)
    page = _page(rep)
    data = json.loads(re.search(r'id="hk-data">(.*?)</script>', page, re.S).group(1))
    from hpc_hangkit.ranges import parse_ranks

    covered = [r for row in data["rows"] for r in parse_ranks(row[0])]
    assert sorted(covered) == sorted(rep.ranks)
    assert page.count("<tr") < 60
    assert len(page) < 4096 * 60


def test_page_is_self_contained_ascii_with_a_policy_that_allows_no_fetch():
    rep, _ = html_cases.big_report(64)
    page = _page(rep)
    page.encode("ascii")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"\b(src|srcset)=", page)
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    assert "@import" not in page and "url(" not in page


def test_job_text_is_escaped_everywhere():
    rep, _ = html_cases.big_report(64)
    evil = '</script><script>alert(1)</script><img src=x onerror=alert(2)>'
    rep.warnings.append(evil)
    rep.reason += " " + evil
    rep.unwatched[70] = evil
    page = _page(rep)
    assert evil not in page
    assert page.count("<script") == 2      # the data block and the page's own script
    assert "&lt;/script&gt;" in page


def test_report_cli_writes_the_page_and_refuses_an_unwritable_path_first(tmp_path):
    html_path, rep = html_cases.golden_page("SPLIT", str(tmp_path))
    case_dir = os.path.dirname(html_path)
    os.unlink(html_path)
    out = tmp_path / "page" / "r.html"
    out.parent.mkdir()
    env = dict(os.environ, HPC_HANGKIT_CONFIG=os.devnull)
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "report", case_dir, "--html", str(out)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, env=env)
    assert p.returncode == 0, p.stderr.decode()
    assert ("HTML report: %s" % out) in p.stdout.decode()
    page = out.read_text()
    assert "hpc-hangkit roll call: SPLIT" in page
    # evidence links are relative to the page's own directory
    assert 'href="../%s/watchdog/rank_1.log"' % os.path.basename(case_dir) in page
    bad = tmp_path / "missing" / "r.html"
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "report", case_dir, "--html", str(bad)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, env=env)
    assert p.returncode == 2
    assert "cannot write %s" % bad in p.stderr.decode()
    p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", "4242", "--html", str(tmp_path)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, env=env)
    assert p.returncode == 2 and "is a directory" in p.stderr.decode(), p.stderr.decode()


def test_branch_source_lines_are_shown_with_the_branch_line_marked(tmp_path):
    html_path, rep = html_cases.golden_page("SPLIT", str(tmp_path))
    page = open(html_path).read()
    b = [g.branch for g in rep.groups if g.branch][0]
    assert b["line"] == 74
    assert '<tr class="hl"><td>74</td><td>        if rank != skip_rank or step != skip_step:</td></tr>' in page
    assert "<td>73</td>" in page and "<td>78</td>" in page


@pytest.mark.timeout(120)
def test_collector_stores_report_html_next_to_report_txt(tmp_path):
    """The monitor's write_report leaves report.html beside report.txt in hang_detector/;
    the epilog's collector (root, dropping to the job's user) stores the three side by
    side, and the stored page's evidence links resolve inside storage."""
    import time

    from collect_helpers import Area, job_user, need_root

    from hpc_hangkit import layout
    from hpc_hangkit.detect.monitor import write_report
    from hpc_hangkit.collect import attempt

    need_root()
    html_path, rep = html_cases.golden_page("SPLIT", str(tmp_path))
    hd = os.path.dirname(html_path)
    os.unlink(html_path)
    write_report(hd, world_size=4)
    names = sorted(os.listdir(hd))
    assert {layout.REPORT_TXT, layout.REPORT_JSON, layout.REPORT_HTML} <= set(names), names
    files = {}
    for root, _, fnames in os.walk(hd):
        for n in fnames:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                files["hang_detector/" + os.path.relpath(p, hd)] = f.read()
    area = Area()
    try:
        uid, gid, user = job_user()
        area.make_attempt("7301", 0, uid, gid, files)
        res = attempt.collect_attempt(area.scratch, "7301", 0, "file://" + area.storage, uid=uid, gid=gid,
                                     user=user, deadline=time.monotonic() + 60, host="hk1")
        assert res["status"] == "complete", res
        stored = os.path.join(area.storage, layout.storage_attempt_prefix("7301", 0), layout.HANG_DETECTOR_DIR)
        assert os.path.isfile(os.path.join(stored, layout.REPORT_TXT))
        with open(os.path.join(stored, layout.REPORT_HTML)) as f:
            page = f.read()
        assert "hpc-hangkit roll call: SPLIT" in page
        links = re.findall(r'<a href="([^"]+)"', page)
        assert "watchdog/rank_1.log" in links
        for href in links:
            assert os.path.isfile(os.path.join(stored, href)), href
    finally:
        area.cleanup()


class _Outline(HTMLParser):
    """Headings in order, tables (with their captions/labels/header cells), labelled inputs."""

    def __init__(self):
        super().__init__()
        self.headings, self.tables, self.ths, self.labels, self.inputs, self.summaries = [], [], [], set(), [], 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag):
            self.headings.append(int(tag[1]))
        elif tag == "table":
            self.tables.append({"label": bool(a.get("aria-label")), "caption": False, "thead": False})
        elif tag == "caption" and self.tables:
            self.tables[-1]["caption"] = True
        elif tag == "thead" and self.tables:
            self.tables[-1]["thead"] = True
        elif tag == "th":
            self.ths.append(a.get("scope"))
        elif tag == "label":
            self.labels.add(a.get("for"))
        elif tag == "input":
            self.inputs.append(a.get("id"))
        elif tag == "summary":
            self.summaries += 1


@pytest.mark.parametrize("verdict", sorted(html_cases.CASES))
def test_page_structure_is_semantic(tmp_path, verdict):
    """One h1, headings that never skip a level, every header cell scoped, every data
    table headed (thead) or named (caption / aria-label), every input labelled, the tree
    made of native disclosure elements (keyboard-operable without script)."""
    path, rep = html_cases.golden_page(verdict, str(tmp_path))
    with open(path) as fh:
        page = fh.read()
    o = _Outline()
    o.feed(page)
    assert o.headings[0] == 1 and o.headings.count(1) == 1, o.headings
    assert all(b - a <= 1 for a, b in zip(o.headings, o.headings[1:])), o.headings
    assert o.ths and all(s in ("col", "row") for s in o.ths), o.ths
    assert o.tables and all(t["thead"] or t["caption"] or t["label"] for t in o.tables), o.tables
    assert o.inputs and all(i in o.labels for i in o.inputs), (o.inputs, o.labels)
    assert o.summaries > 0
    for sec in ("summary", "groups", "tree", "timeline", "nvidia-smi", "evidence", "spread", "warnings",
                "text-report"):
        assert '<section id="%s" aria-labelledby="h-' % sec in page, sec
