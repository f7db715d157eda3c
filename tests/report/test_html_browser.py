"""The HTML report in a real headless Chromium (Debian's ``chromium``, driven by Playwright
for Python through ``executable_path``; Playwright's own browser download is never used).
tests/run_all.sh installs both (apt ``chromium``, the ``[test]`` extra's ``playwright``).

For the golden SPLIT (with its branch), GONE and TOGETHER cases: the page opens from
``file://``, shows the verdict, the group lines and the branch line, its tree opens and
closes by keyboard, the rank filter hides what does not hold the rank, nothing is
requested but the page itself and nothing is logged as an error. Without JavaScript the
verdict and the text report are still there.

Every check after an action waits on a condition (Playwright's ``expect``), never on a
fixed sleep, so a loaded 2-core machine only makes it slower. A full-page screenshot of
each case is kept: under ``$HK_TEST_ARTIFACTS`` when set, else in pytest's base temporary
directory (``html-screenshots/``; pytest keeps the last three runs), and its path is a
test property (``--junitxml``). ``HK_REGENERATE_SCREENSHOT=1`` also rewrites the README's
picture, docs/images/report.png, from the SPLIT case.
"""
import os

import pytest

import html_cases
from hpc_hangkit.ranges import format_ranks
from hpc_hangkit.rollcall.prose import short_where

CHROMIUM = html_cases.chromium()
if CHROMIUM is None:
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium; tests/run_all.sh installs it)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (the [test] extra) is not installed")
expect = sync_api.expect

# generous: these bound a wait on a condition, they do not time anything
WAIT_MS = 30000
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium refuses its sandbox
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], timeout=WAIT_MS * 2)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    d = os.environ.get("HK_TEST_ARTIFACTS") or str(tmp_path_factory.getbasetemp() / "html-screenshots")
    os.makedirs(d, exist_ok=True)
    return d


class Watched:
    """A page whose every request is seen (``request`` events) and intercepted (only the
    page's own URL may load), and whose console errors, warnings and uncaught exceptions
    are recorded."""

    def __init__(self, browser, url, js=True):
        self.url, self.requests, self.routed, self.errors = url, [], [], []
        self.ctx = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=js)
        self.ctx.set_default_timeout(WAIT_MS)
        self.ctx.route("**/*", self._route)
        self.page = self.ctx.new_page()
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: m.type in ("error", "warning") and self.errors.append(
            "%s: %s" % (m.type, m.text)))
        self.page.on("pageerror", lambda e: self.errors.append("pageerror: %s" % e))
        self.page.goto(url, wait_until="load")

    def _route(self, route):
        self.routed.append(route.request.url)
        if route.request.url == self.url:
            route.continue_()
        else:
            route.abort()

    def close(self):
        self.ctx.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("verdict", sorted(html_cases.CASES))
def test_golden_page_in_chromium(browser, artifacts, tmp_path, verdict, record_property):
    path, rep = html_cases.golden_page(verdict, str(tmp_path))
    url = "file://" + path
    w = Watched(browser, url)
    page = w.page
    try:
        expect(page.locator("h1")).to_have_text("hpc-hangkit roll call: %s" % verdict)
        v = page.locator("#verdict")
        expect(v).to_be_visible()
        expect(v).to_contain_text(verdict)
        expect(v).to_contain_text(rep.reason[:60])
        for i, g in enumerate(rep.groups):
            row = page.locator("#group-%d" % i)
            expect(row).to_be_visible()
            expect(row).to_contain_text(format_ranks(g.ranks))
            if g.frame is not None:
                expect(row).to_contain_text(short_where(g.frame))
        if verdict == "SPLIT":
            br = page.locator(".branch")
            expect(br).to_be_visible()
            expect(br).to_contain_text("split at")
            expect(br).to_contain_text("if rank != skip_rank or step != skip_step:")
            hl = page.locator(".src tr.hl")
            expect(hl).to_be_visible()
            expect(hl.locator("td").first).to_have_text("74")
        if rep.suspect_ranks:
            expect(page.locator("#suspects")).to_have_text("suspect rank%s %s" % (
                "" if len(rep.suspect_ranks) == 1 else "s", format_ranks(rep.suspect_ranks)))

        # the tree opens by keyboard. The branch is addressed by its index among all the
        # tree's branches (a ":not([open])" locator would move to another once this opens).
        index = page.locator(".tree details").evaluate_all("ds => ds.findIndex(d => !d.open)")
        assert index >= 0, "every branch of the tree is open on load"
        closed = page.locator(".tree details").nth(index)
        child = closed.locator(":scope > details > summary, :scope > .leaf").first
        expect(child).to_be_hidden()
        # in the Tab order (a native disclosure), not only focusable by script
        assert closed.locator(":scope > summary").evaluate("s => s.tabIndex") == 0
        closed.locator(":scope > summary").focus()
        expect(closed.locator(":scope > summary")).to_be_focused()
        page.keyboard.press("Enter")
        expect(closed).to_have_attribute("open", "")
        expect(child).to_be_visible()
        page.keyboard.press("Space")
        expect(closed).not_to_have_attribute("open", "")
        expect(child).to_be_hidden()
        # Tab from the filter reaches the controls: the page is usable without a mouse
        page.locator("#rank-filter").focus()
        page.keyboard.press("Tab")
        expect(page.locator("#filter-clear")).to_be_focused()

        # filter by rank: a rank of the smallest group; the other groups hide, its row is listed
        small = min(rep.groups, key=lambda g: len(g.ranks))
        r = small.ranks[0]
        page.locator("#rank-filter").fill(str(r))
        expect(page.locator("#filter-status")).to_contain_text("1 group(s) hold ranks %d" % r)
        for i, g in enumerate(rep.groups):
            row = page.locator("#group-%d" % i)
            if r in g.ranks:
                expect(row).to_be_visible()
            else:
                expect(row).to_be_hidden()
        expect(page.locator("#rank-table")).to_be_visible()
        expect(page.locator("#rank-rows tr")).to_have_count(1)
        expect(page.locator("#rank-rows tr").first.locator("td").first).to_have_text(str(r))
        page.locator("#filter-clear").click()
        expect(page.locator("#filter-status")).to_have_text("showing every rank")
        for i in range(len(rep.groups)):
            expect(page.locator("#group-%d" % i)).to_be_visible()
        expect(page.locator("#rank-table")).to_be_hidden()
        page.locator("#rank-filter").fill("0-")
        expect(page.locator("#filter-status")).to_contain_text("not a rank set")
        page.locator("#rank-filter").fill("")
        expect(page.locator("#filter-status")).to_have_text("showing every rank")

        shot = os.path.join(artifacts, "%s.png" % verdict.lower())
        page.screenshot(path=shot, full_page=True)
        record_property("screenshot", shot)
        assert os.path.getsize(shot) > 10000
        if verdict == "SPLIT" and os.environ.get("HK_REGENERATE_SCREENSHOT") == "1":
            page.locator("#rank-filter").blur()
            page.set_viewport_size({"width": 1100, "height": 900})
            os.makedirs(os.path.dirname(html_cases.README_PICTURE), exist_ok=True)
            page.screenshot(path=html_cases.README_PICTURE, full_page=False)
        assert w.requests == [url], w.requests
        assert w.routed == [url], w.routed
        assert w.errors == [], w.errors
    finally:
        w.close()


@pytest.mark.timeout(120)
def test_page_reads_without_javascript(browser, tmp_path):
    path, rep = html_cases.golden_page("SPLIT", str(tmp_path))
    w = Watched(browser, "file://" + path, js=False)
    try:
        page = w.page
        expect(page.locator("#verdict")).to_contain_text("SPLIT")
        expect(page.locator("#group-1")).to_be_visible()
        text = page.locator("#text-report pre")
        expect(text).to_contain_text("suspect rank: 1")
        assert text.inner_text().startswith("hpc-hangkit roll call: SPLIT")
        expect(page.locator("#js-note")).to_be_hidden()   # the filter's note needs the script
        assert w.requests == ["file://" + path]
    finally:
        w.close()


@pytest.mark.timeout(180)
def test_4096_rank_page_filters_to_one_rank(browser, tmp_path):
    """A 4,096-rank page (node summaries): grouped on load; the filter lists one rank's row."""
    from hpc_hangkit.report.html import render_html

    rep, suspects = html_cases.big_report(4096, jitter=True)
    path = tmp_path / "big.html"
    path.write_text(render_html(rep))
    w = Watched(browser, "file://%s" % path)
    try:
        page = w.page
        assert page.locator("tr").count() < 60
        page.locator("#rank-filter").fill(str(suspects[0]))
        rows = page.locator("#rank-rows tr")
        expect(rows).to_have_count(1)
        expect(rows.first.locator("td").first).to_have_text(str(suspects[0]))
        page.locator("#rank-filter").fill("100-399")
        expect(page.locator("#rank-rows tr")).to_have_count(200)     # the table's cap
        assert w.errors == [], w.errors
    finally:
        w.close()


_TEXT_COLOURS_JS = r"""() => {
  const out = new Map();
  const w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = w.nextNode(); n; n = w.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || !el.checkVisibility()) continue;
    const fg = getComputedStyle(el).color;
    let bg = "rgb(255, 255, 255)";    // the canvas (color-scheme: light)
    for (let a = el; a; a = a.parentElement) {
      const b = getComputedStyle(a).backgroundColor;
      if (b !== "rgba(0, 0, 0, 0)" && b !== "transparent") { bg = b; break; }
    }
    const key = fg + "|" + bg;
    if (!out.has(key)) out.set(key, [fg, bg, n.textContent.trim().slice(0, 40)]);
  }
  return [...out.values()];
}"""


def _hex(css):
    import re

    m = re.fullmatch(r"rgba?\((\d+), (\d+), (\d+)(?:, ([\d.]+))?\)", css)
    assert m and (m.group(4) is None or float(m.group(4)) == 1.0), "not an opaque colour: %s" % css
    return "#%02x%02x%02x" % tuple(int(m.group(i)) for i in (1, 2, 3))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("verdict", sorted(html_cases.CASES))
def test_rendered_text_contrast_passes_wcag_aa(browser, tmp_path, verdict):
    """Every visible text run, with the whole tree and every disclosure open and a rank
    filtered (the per-rank table shown): its computed colour against the first opaque
    background behind it has a WCAG 2 contrast ratio of at least 4.5:1 (AA, normal text),
    by hpc_hangkit.report.html.contrast_ratio."""
    from hpc_hangkit.report.html import contrast_ratio

    path, rep = html_cases.golden_page(verdict, str(tmp_path))
    w = Watched(browser, "file://" + path)
    try:
        page = w.page
        page.locator("#tree-open").click()
        expect(page.locator(".tree details:not([open])")).to_have_count(0)
        page.locator("details:not([open]) > summary").evaluate_all("ss => ss.forEach(s => s.click())")
        expect(page.locator("details:not([open])")).to_have_count(0)
        page.locator("#rank-filter").fill(str(rep.groups[0].ranks[0]))
        expect(page.locator("#rank-table")).to_be_visible()
        pairs = page.evaluate(_TEXT_COLOURS_JS)
        assert len(pairs) >= 5, pairs
        low = [(fg, bg, text, round(contrast_ratio(_hex(fg), _hex(bg)), 2)) for fg, bg, text in pairs
               if contrast_ratio(_hex(fg), _hex(bg)) < 4.5]
        assert low == [], low
        assert w.errors == [], w.errors
    finally:
        w.close()
