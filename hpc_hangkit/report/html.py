"""The roll call as one self-contained HTML page (``report --html``, ``collect --html``,
the collector's ``report.html``).

:func:`render_html` is pure (a :class:`hpc_hangkit.rollcall.Report` and an optional
:class:`Evidence` in, one HTML string out). :func:`gather_evidence` is the only I/O:
the evidence files under a directory (links by relative path), the nvidia-smi
snapshots, and the source lines around each group's branch.

The page loads nothing (inline CSS and script; a Content-Security-Policy allows no
fetch), reads without JavaScript (every section is static HTML and the text report is
inside it) and uses the script only to expand, collapse and filter by rank. Ranks are
always shown as rank sets: the size grows with the groups and the distinct call
chains, not with the ranks, except one compact per-rank timeline table (rank sets
that share their times) that the script expands for the ranks a filter names.
How to read it: docs/report.md.
"""
import json
import os
import stat
from typing import Dict, List, NamedTuple, Optional, Tuple
from urllib.parse import quote

from hpc_hangkit.ranges import format_ranks, ranks_label
from hpc_hangkit.rollcall.prose import short_where, split_at
from hpc_hangkit.report.render import build_tree, render_text, unreachable_suspects_note

__all__ = ["PALETTE", "Evidence", "render_html", "gather_evidence", "contrast_ratio", "MAX_FILES",
           "MAX_TEXT_LINES"]

#: colour pairs (text, background) the stylesheet uses; every pair has a WCAG 2 contrast
#: ratio of at least 4.5:1 (level AA for normal text), checked by tests/report/test_html.py
PALETTE: Dict[str, Tuple[str, str]] = {
    "page": ("#1a1a1a", "#ffffff"),
    "muted": ("#4d4d4d", "#ffffff"),
    "link": ("#0b57d0", "#ffffff"),
    "head": ("#ffffff", "#1f3a5f"),
    "code": ("#1a1a1a", "#f3f5f7"),
    "suspect": ("#8f1a1a", "#fdecec"),
    "waiting": ("#174ea6", "#e8f0fe"),
    "exited": ("#3c4043", "#ececec"),
    "mismatch": ("#7a2e00", "#fff1c9"),
    "hl": ("#1a1a1a", "#fff2a8"),
    "th": ("#1a1a1a", "#e4e8ee"),
}

#: evidence files linked at most (the rest are counted per directory)
MAX_FILES = 2000
#: lines of the embedded text report at most (the check-in list grows with the ranks)
MAX_TEXT_LINES = 3000
_MAX_BRANCHES = 16   # children shown per tree node (as the text tree)
_MAX_SMI_BYTES = 64 << 10
_MAX_SMI_FILES = 32
_CONTEXT = 4         # source lines shown on each side of a branch line


class Evidence(NamedTuple):
    """What :func:`gather_evidence` found next to the report.

    ``files``: ``[(href, path, size)]``: href relative to the page (URL-quoted), path
    relative to the evidence root, size in bytes, sorted by path, at most
    :data:`MAX_FILES`; ``more``: ``{directory: files left out}``; ``smi``: ``[(path,
    text)]`` nvidia-smi snapshots (each cut at 64 KiB); ``sources``: ``{(file, line):
    [(lineno, text)]}`` the source lines around each branch line."""
    files: List[Tuple[str, str, int]]
    more: Dict[str, int]
    smi: List[Tuple[str, str]]
    sources: Dict[Tuple[str, int], List[Tuple[int, str]]]


def _lum(hex_colour: str) -> float:
    v = [int(hex_colour[i:i + 2], 16) / 255.0 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in v]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast_ratio(fg: str, bg: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours (1.0 to 21.0)."""
    a, b = sorted((_lum(fg), _lum(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def _e(s) -> str:
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _json_script(obj) -> str:
    # inside <script>: "<" escaped so no text of the job can close the element
    return json.dumps(obj, separators=(",", ":")).replace("<", "\\u003c")


# --- evidence (the only I/O) ---------------------------------------------------

def _read_capped(path: str, limit: int) -> Optional[str]:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = data[:limit].decode("utf-8", errors="replace")
    return text + ("\n... (cut at %d KiB)" % (limit >> 10) if len(data) > limit else "")


def gather_evidence(root: str, html_path: str, report=None) -> Evidence:
    """The evidence under ``root`` (a directory, walked without following symbolic links;
    or one file) for a page written to ``html_path``: file links relative to the page's
    directory, nvidia-smi snapshots (files under an ``nvidia_smi`` directory), and, when
    ``report`` is given, the source lines around each group's branch (read with
    :func:`hpc_hangkit.rollcall.branch.read_source`: absolute ``*.py`` paths only, no
    links). Never raises for an unreadable file: it is left out."""
    page_dir = os.path.dirname(os.path.abspath(html_path))
    me = os.path.abspath(html_path)
    found: List[Tuple[str, int]] = []
    root = os.path.abspath(root)
    if os.path.isfile(root):
        found.append((root, os.path.getsize(root)))
        base = os.path.dirname(root)
    else:
        base = root
        stack = [root]
        while stack:
            d = stack.pop()
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for ent in entries:
                try:
                    if ent.is_dir(follow_symlinks=False):
                        stack.append(ent.path)
                    elif ent.is_file(follow_symlinks=False) and ent.path != me:
                        found.append((ent.path, ent.stat(follow_symlinks=False).st_size))
                except OSError:
                    continue
    found.sort()
    files, more = [], {}
    smi = []
    for path, size in found:
        rel = os.path.relpath(path, base).replace(os.sep, "/")
        if len(files) < MAX_FILES:
            href = quote(os.path.relpath(path, page_dir).replace(os.sep, "/"))
            files.append((href, rel, size))
        else:
            d = rel.rsplit("/", 1)[0] if "/" in rel else "."
            more[d] = more.get(d, 0) + 1
        if "nvidia_smi" in rel.split("/")[:-1] and len(smi) < _MAX_SMI_FILES:
            text = _read_capped(path, _MAX_SMI_BYTES)
            if text is not None:
                smi.append((rel, text))
    sources = {}
    for g in getattr(report, "groups", ()) or ():
        b = g.branch
        if not b or (b["file"], b["line"]) in sources:
            continue
        from hpc_hangkit.rollcall.branch import read_source

        try:
            lines = read_source(b["file"]).splitlines()
        except (OSError, ValueError):
            continue
        lo, hi = max(1, b["line"] - _CONTEXT), min(len(lines), b["line"] + _CONTEXT)
        sources[(b["file"], b["line"])] = [(n, lines[n - 1]) for n in range(lo, hi + 1)]
    return Evidence(files, more, smi, sources)


# --- the page --------------------------------------------------------------------

_CSS = """
:root{color-scheme:light}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:%(page_fg)s;background:%(page_bg)s}
header{background:%(head_bg)s;color:%(head_fg)s;padding:14px 22px}
header h1{margin:0;font-size:22px}
main{padding:8px 22px 40px;max-width:1400px}
h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid #9aa4b2;padding-bottom:3px}
h3{font-size:15px;margin:14px 0 6px}
a{color:%(link_fg)s}
code,pre,.mono{font-family:ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:13px}
pre{background:%(code_bg)s;color:%(code_fg)s;padding:8px 10px;overflow:auto;border:1px solid #c5ccd6}
.verdict{font-size:16px;max-width:75em}
.muted{color:%(muted_fg)s}
table{border-collapse:collapse;margin:4px 0 10px}
th,td{border:1px solid #b3bcc8;padding:3px 8px;text-align:left;vertical-align:top}
th{background:%(th_bg)s;color:%(th_fg)s}
.suspect,.role-divergent{background:%(suspect_bg)s;color:%(suspect_fg)s}
.role-waiting{background:%(waiting_bg)s;color:%(waiting_fg)s}
.role-exited{background:%(exited_bg)s;color:%(exited_fg)s}
.mismatch{background:%(mismatch_bg)s;color:%(mismatch_fg)s;font-weight:600}
.hl{background:%(hl_bg)s;color:%(hl_fg)s;font-weight:700}
.src{margin:4px 0;border-collapse:collapse}
.src td{border:none;padding:0 8px;font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:13px;white-space:pre}
.tree details{margin-left:18px}
.tree>details{margin-left:0}
.tree summary{cursor:pointer;font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:13px;padding:1px 2px}
.tree summary:focus-visible,button:focus-visible,input:focus-visible,a:focus-visible{outline:3px solid #1f3a5f;outline-offset:1px}
.tree .leaf{margin-left:18px;font-family:ui-monospace,monospace;font-size:13px}
.mark{font-weight:700}
.bar{position:relative;height:14px;min-width:240px;background:%(code_bg)s;border:1px solid #b3bcc8}
.bar span{position:absolute;top:0;height:12px;width:4px;background:#1f3a5f}
.bar span.hb{background:#174ea6;top:1px;height:10px;width:8px;border-radius:5px}
.bar span.rng{background:#7d8fa8;height:4px;top:4px}
.controls{margin:10px 0;padding:8px 10px;border:1px solid #b3bcc8;background:%(code_bg)s;color:%(code_fg)s}
.controls input{font:inherit;width:14em}
[hidden]{display:none!important}
"""

_JS = r"""
(function(){
"use strict";
function parse(t){var out=[];t=(t||"").trim();if(!t)return out;
 t.split(",").forEach(function(p){p=p.trim();if(!p)return;var m=/^(\d+)(?:-(\d+))?$/.exec(p);
  if(!m)throw new Error("not a rank set: "+p);var a=+m[1],b=m[2]===undefined?a:+m[2];if(b<a)throw new Error("bad range: "+p);out.push([a,b]);});
 return out;}
function hits(a,b){for(var i=0;i<a.length;i++)for(var j=0;j<b.length;j++)if(a[i][0]<=b[j][1]&&b[j][0]<=a[i][1])return true;return false;}
var cache=new WeakMap();
function setOf(el){var s=cache.get(el);if(!s){s=parse(el.getAttribute("data-ranks"));cache.set(el,s);}return s;}
var data=JSON.parse(document.getElementById("hk-data").textContent);
var input=document.getElementById("rank-filter"),status=document.getElementById("filter-status");
var tbody=document.getElementById("rank-rows");
function fmt(v){return v===null||v===undefined?"-":(v>=0?"+":"")+v.toFixed(1)+" s";}
function rankRows(want){
 var rows=[],n=0,LIMIT=200;
 for(var i=0;i<data.rows.length&&n<LIMIT;i++){var row=data.rows[i],rs=parse(row[0]);
  for(var k=0;k<rs.length&&n<LIMIT;k++){for(var r=rs[k][0];r<=rs[k][1]&&n<LIMIT;r++){
   if(!hits([[r,r]],want))continue;rows.push([r,row]);n++;}}}
 rows.sort(function(a,b){return a[0]-b[0];});
 tbody.textContent="";
 rows.forEach(function(x){var row=x[1],tr=document.createElement("tr");
  var g=data.groups[row[1]]||"-",cells=[String(x[0]),g,data.states[row[2]]||"-",fmt(row[3]),fmt(row[4]),
   row[5]<0?"-":data.labels[row[5]],fmt(row[6]),frOf(x[0])];
  cells.forEach(function(c){var td=document.createElement("td");td.textContent=c;tr.appendChild(td);});
  tbody.appendChild(tr);});
 document.getElementById("rank-table").hidden=rows.length===0;
 return rows.length;}
function frOf(r){var out=[];data.fr.forEach(function(f){if(hits(parse(f[0]),[[r,r]]))out.push(f[1]);});return out.join("; ")||"-";}
function apply(){
 var want;try{want=parse(input.value);}catch(e){status.textContent=e.message;return;}
 var all=want.length===0,shown=0;
 document.querySelectorAll("[data-ranks].filterable").forEach(function(el){
  var ok=all||hits(setOf(el),want);el.hidden=!ok;if(ok&&el.classList.contains("group"))shown++;});
 document.querySelectorAll(".tree details[data-ranks]").forEach(function(el){
  var ok=all||hits(setOf(el),want);el.hidden=!ok;if(!all&&ok)el.open=true;});
 if(all){tbody.textContent="";document.getElementById("rank-table").hidden=true;status.textContent="showing every rank";return;}
 var n=rankRows(want);
 status.textContent=shown+" group(s) hold ranks "+input.value.trim()+"; "+n+" rank row(s) in the timeline";}
input.addEventListener("input",apply);
document.getElementById("filter-clear").addEventListener("click",function(){input.value="";apply();input.focus();});
function all(open){document.querySelectorAll(".tree details").forEach(function(d){d.open=open;});}
document.getElementById("tree-open").addEventListener("click",function(){all(true);});
document.getElementById("tree-close").addEventListener("click",function(){all(false);});
document.getElementById("js-note").hidden=false;
})();
"""


def _css() -> str:
    vals = {}
    for name, (fg, bg) in PALETTE.items():
        vals[name + "_fg"], vals[name + "_bg"] = fg, bg
    return _CSS % vals


def _ranks_cell(ranks) -> str:
    return '<span class="mono">%s</span> <span class="muted">(%d)</span>' % (_e(format_ranks(ranks)), len(ranks))


def _frame_text(f) -> str:
    return _e(short_where(f)) if f is not None else ""


def _groups_html(report, ev: Evidence) -> List[str]:
    sus = set(report.suspect_ranks)
    out = ['<section id="groups" aria-labelledby="h-groups"><h2 id="h-groups">Groups</h2>']
    if not report.groups:
        out.append("<p>No rank has a stack sample.</p></section>")
        return out
    out.append('<table><caption class="muted">one row per position; rank sets as ranges</caption>'
               '<thead><tr><th scope="col">ranks</th><th scope="col">role</th><th scope="col">where</th>'
               '<th scope="col">collective</th><th scope="col">call chain and detail</th></tr></thead><tbody>')
    for i, g in enumerate(report.groups):
        cls = "suspect" if g.ranks and set(g.ranks) <= sus else "role-%s" % g.role
        word = {"waiting": "waiting at", "divergent": "stopped at", "exited": "exited at",
                "progressing": "moving, now at"}.get(g.role, g.role)
        where = _frame_text(g.frame) if g.frame is not None else _e(g.detail or "no position")
        parts = []
        chain = g.via(None)
        if chain:
            parts.append("<details><summary>call chain (%d frame%s outward)</summary><ol class=\"mono\">%s</ol>"
                         "</details>" % (len(chain), "" if len(chain) == 1 else "s",
                                         "".join("<li>via %s</li>" % _frame_text(f) for f in chain)))
        for rs, top, api in g.inside:
            parts.append('<div class="mono">inside %s: %s%s</div>' % (
                _e(ranks_label(rs)), _frame_text(api), "" if top == api else " &rarr; " + _frame_text(top)))
        if g.branch is not None:
            parts.append('<div class="branch"><strong>split at</strong> <code>%s</code></div>' % _e(split_at(g.branch)))
            src = ev.sources.get((g.branch["file"], g.branch["line"]))
            if src:
                parts.append('<table class="src" aria-label="source around the branch"><tbody>%s</tbody></table>' % "".join(
                    '<tr%s><td>%d</td><td>%s</td></tr>' % (' class="hl"' if n == g.branch["line"] else "", n, _e(t))
                    for n, t in src))
        if g.detail and g.role not in ("waiting", "divergent"):
            parts.append('<div class="muted">%s</div>' % _e(g.detail[:500]))
        if g.exit:
            parts.append('<div class="muted">exit: %s</div>' % _e(", ".join(
                "%s=%s" % (k, v) for k, v in sorted(g.exit.items()) if v not in (None, ""))))
        coll = _e(g.collective) if g.collective else '<span class="muted">-</span>'
        if g.collective and g.top is not None and g.top is not g.frame:
            coll += ' <span class="muted mono">&rarr; %s</span>' % _frame_text(g.top)
        out.append('<tr id="group-%d" class="%s filterable group" data-ranks="%s"><td>%s%s</td><td>%s</td>'
                   '<td class="mono">%s</td><td>%s</td><td>%s</td></tr>' % (
                       i, cls, _e(format_ranks(g.ranks)), _ranks_cell(g.ranks),
                       ' <strong class="mark">suspect</strong>' if cls == "suspect" else "",
                       _e(word), where, coll, "".join(parts)))
    out.append("</tbody></table></section>")
    return out


def _tree_html(report) -> List[str]:
    root = build_tree(report)
    sus = set(report.suspect_ranks)
    out = ['<section id="tree" aria-labelledby="h-tree"><h2 id="h-tree">Call-prefix tree</h2>',
           '<p class="muted">Outermost frame first; each branch shows its rank set. '
           '<strong>&#9733; suspect</strong>: only suspect ranks; <strong>&#9656; on the suspects\' path</strong>: '
           'holds a suspect rank. Enter or Space on a line opens and closes it.</p>',
           '<p><button type="button" id="tree-open">expand all</button> '
           '<button type="button" id="tree-close">collapse all</button></p><div class="tree">']
    if not root.children:
        out.append("<p>No rank has a stack sample.</p></div></section>")
        return out

    def kids(n):
        return sorted(n.children.values(), key=lambda c: (-len(c.ranks), c.ranks[0]))

    def walk(n, depth):
        rs = set(n.ranks)
        only = bool(rs) and rs <= sus
        onpath = bool(rs & sus)
        mark = (' <strong class="mark">&#9733; suspect</strong>' if only else
                ' <strong class="mark">&#9656; on the suspects\' path</strong>' if onpath else "")
        rtxt = _e(format_ranks(n.ranks))
        label = '<span class="mono">[%s]</span> %s%s' % (rtxt, _frame_text(n.frame), mark)
        ch = kids(n)
        if not ch:
            out.append('<div class="leaf filterable%s" data-ranks="%s">%s</div>' % (
                " suspect" if only else "", rtxt, label))
            return
        opened = depth == 0 or onpath
        out.append('<details data-ranks="%s"%s><summary%s>%s</summary>' % (
            rtxt, " open" if opened else "", ' class="suspect"' if only else "", label))
        for c in ch[:_MAX_BRANCHES]:
            walk(c, depth + 1)
        if len(ch) > _MAX_BRANCHES:
            rest = ch[_MAX_BRANCHES:]
            out.append('<div class="leaf muted">... %d more branches (%d ranks)</div>' % (
                len(rest), sum(len(c.ranks) for c in rest)))
        out.append("</details>")

    for c in kids(root):
        walk(c, 0)
    out.append("</div></section>")
    return out


def _fr_html(sec) -> List[str]:
    out = ['<section id="flight-recorder" aria-labelledby="h-fr"><h2 id="h-fr">Flight Recorder</h2>',
           "<p>%s</p>" % _e(sec.get("summary") or "")]
    kinds = {"args": "same call site, different sizes/dtypes", "type": "different collectives at one sequence id",
             "line": "the same collective from different call sites", "seq": "ranks at different sequence ids",
             "together": "every rank at the same collective"}
    for f in sec.get("pgs") or ():
        gs = f.get("groups") or []
        desc = f.get("desc") or ""
        out.append("<h3>process group %s%s: %s%s</h3>" % (
            _e(f.get("pg")), " (%s)" % _e(desc) if desc not in ("", "undefined") else "",
            _e(kinds.get(f.get("kind"), f.get("kind"))),
            ' <strong class="mark mismatch">mismatch</strong>' if f.get("kind") != "together" else ""))
        out.append('<table><thead><tr><th scope="col">ranks</th><th scope="col">seq id</th><th scope="col">op</th>'
                   '<th scope="col">sizes</th><th scope="col">dtypes</th><th scope="col">where</th>'
                   '<th scope="col">state</th></tr></thead><tbody>')
        cols = ("seq", "op", "sizes", "dtypes", "where")
        differ = {c for c in cols if len({json.dumps(g.get(c)) for g in gs}) > 1}
        for g in gs:
            cells = []
            for c in cols:
                v = g.get(c)
                txt = ",".join(map(str, v)) if c == "dtypes" else (json.dumps(v) if c == "sizes" else str(v))
                if c in differ:
                    cells.append('<td class="mismatch mono">&ne; %s</td>' % _e(txt or "-"))
                else:
                    cells.append('<td class="mono">%s</td>' % _e(txt or "-"))
            out.append('<tr class="filterable" data-ranks="%s"><td>%s</td>%s<td>%s</td></tr>' % (
                _e(format_ranks(g.get("ranks") or [])), _ranks_cell(g.get("ranks") or []), "".join(cells),
                "pending" if g.get("pending") else "completed"))
        out.append("</tbody></table>")
    out.append("<details><summary>section text</summary><pre>%s</pre></details></section>" % _e(
        "\n".join(str(x) for x in sec.get("text") or ())))
    return out


def _section_html(name, title, sec) -> List[str]:
    out = ['<section id="%s" aria-labelledby="h-%s"><h2 id="h-%s">%s</h2><p>%s</p>' % (
        name, name, name, _e(title), _e(sec.get("summary") or ""))]
    gs = sec.get("groups") or []
    if gs:
        out.append('<table><thead><tr><th scope="col">ranks</th><th scope="col">role</th>'
                   '<th scope="col">detail</th></tr></thead><tbody>')
        for g in gs:
            out.append('<tr class="filterable" data-ranks="%s"><td>%s</td><td>%s</td><td class="mono">%s</td></tr>' % (
                _e(format_ranks(g.get("ranks") or [])), _ranks_cell(g.get("ranks") or []),
                _e(g.get("role") or ""), _e(g.get("detail") or "")))
        out.append("</tbody></table>")
    out.append("<pre>%s</pre></section>" % _e("\n".join(str(x) for x in sec.get("text") or ())))
    return out


_STATES = ("stuck", "progressing", "exited", "unknown")


def _timeline(report, fr_rows):
    """(static HTML of the per-group timeline, the per-rank table's data)."""
    group_of = {}
    for i, g in enumerate(report.groups):
        for r in g.ranks:
            group_of[r] = i
    times = []
    for f in report.ranks.values():
        for t in (f.last_write, f.hb.wall_s if f.hb else None, f.taken):
            if t:
                times.append(t)
    ref = report.now if report.now else (max(times) if times else 0.0)
    labels: Dict[str, int] = {}
    rows: Dict[tuple, List[int]] = {}
    per_group: Dict[int, List[float]] = {}
    for r, f in report.ranks.items():
        lw = round(f.last_write - ref, 1) if f.last_write else None
        hb = round(f.hb.wall_s - ref, 1) if f.hb and f.hb.counter else None
        lab = labels.setdefault(f.hb.label or "(no label)", len(labels)) if f.hb and f.hb.counter else -1
        tk = round(f.taken - ref, 1) if f.taken else None
        st = _STATES.index(f.state) if f.state in _STATES else 3
        g = group_of.get(r, -1)
        rows.setdefault((g, st, lw, hb, lab, tk), []).append(r)
        last = max([t for t in (lw, hb) if t is not None], default=None)
        if last is not None:
            per_group.setdefault(g, []).append(last)
    data = {"groups": [format_ranks(g.ranks) + " " + (short_where(g.frame) if g.frame else g.role)
                       for g in report.groups],
            "states": list(_STATES), "labels": list(labels),
            "rows": [[format_ranks(rs)] + list(k) for k, rs in sorted(rows.items(), key=lambda kv: kv[1][0])],
            "fr": fr_rows}
    out = ['<section id="timeline" aria-labelledby="h-timeline"><h2 id="h-timeline">Timeline: when the ranks '
           'stopped moving</h2>']
    if not per_group:
        out.append("<p>No rank has a dump time or a check-in time (file times are trusted only in node "
                   "scratch; a storage copy has none).</p>")
    else:
        lo = min(min(v) for v in per_group.values())
        hi = max(0.0, max(max(v) for v in per_group.values()))
        span = (hi - lo) or 1.0
        out.append('<p class="muted">Seconds relative to %s. Per group: the range of its ranks\' last activity '
                   '(newest dump or check-in). Filter by rank above for one row per rank.</p>' % (
                       "the report" if report.now else "the newest time seen"))
        out.append('<table><thead><tr><th scope="col">ranks</th><th scope="col">group</th>'
                   '<th scope="col">last activity (first .. last)</th><th scope="col">picture</th></tr></thead><tbody>')
        for g, ts in sorted(per_group.items()):
            a, b = min(ts), max(ts)
            name = data["groups"][g] if g >= 0 else "no group"
            ranks = report.groups[g].ranks if g >= 0 else sorted(r for r in report.ranks if r not in group_of)
            left, width = 100 * (a - lo) / span, max(0.8, 100 * (b - a) / span)
            out.append('<tr class="filterable" data-ranks="%s"><td>%s</td><td class="mono">%s</td><td>%+.1f s .. %+.1f s'
                       '</td><td><div class="bar" role="img" aria-label="from %+.1f s to %+.1f s">'
                       '<span class="rng" style="left:%.2f%%;width:%.2f%%"></span></div></td></tr>' % (
                           _e(format_ranks(ranks)), _ranks_cell(ranks), _e(name), a, b, a, b, left, width))
        out.append("</tbody></table>")
    out.append('<table id="rank-table" hidden><caption>ranks named by the filter (at most 200)</caption><thead><tr>'
               '<th scope="col">rank</th><th scope="col">group</th><th scope="col">state</th>'
               '<th scope="col">last dump</th><th scope="col">last check-in</th><th scope="col">label</th>'
               '<th scope="col">stack taken</th><th scope="col">last Flight Recorder entry</th></tr></thead>'
               '<tbody id="rank-rows"></tbody></table></section>')
    return out, data


def render_html(report, evidence: Optional[Evidence] = None, title: Optional[str] = None) -> str:
    """The roll call ``report`` (a :class:`hpc_hangkit.rollcall.Report`) as one HTML5 page.

    ``evidence``: from :func:`gather_evidence` (None: no file links, no nvidia-smi text,
    no branch source lines). ``title``: the page title (default: the verdict). Returns
    the page as a str (UTF-8 when written); it references nothing outside itself but
    the evidence links. Sections: verdict and sentence, groups (ranges, position, call
    chain, branch with its source lines), call-prefix tree, Flight Recorder tables,
    timeline, NCCL RAS, nvidia-smi, evidence files, sample spread, warnings, and the
    text report (report.txt; docs/report.md)."""
    ev = evidence or Evidence([], {}, [], {})
    sus = report.suspect_ranks
    n_ranks = max(report.world or 0, len(report.ranks))
    head = "hpc-hangkit roll call: %s" % report.verdict
    fr = report.sections.get("flight_recorder") if isinstance(report.sections.get("flight_recorder"), dict) else None
    fr_rows = []
    for f in (fr or {}).get("pgs") or ():
        for g in f.get("groups") or ():
            fr_rows.append([format_ranks(g.get("ranks") or []), "pg %s seq %s %s" % (f.get("pg"), g.get("seq"),
                                                                                  g.get("op"))])
    out = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
           'script-src \'unsafe-inline\'; img-src data:">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           "<title>%s</title><style>%s</style></head><body>" % (_e(title or head), _css()),
           '<header><h1 id="verdict-title">%s</h1></header><main>' % _e(head),
           '<section id="summary" aria-labelledby="h-summary"><h2 id="h-summary">Verdict</h2>',
           '<p class="verdict" id="verdict"><strong>%s</strong> (%d rank%s, position = mode of the last %d samples%s): '
           '%s</p>' % (_e(report.verdict), n_ranks, "" if n_ranks == 1 else "s", report.samples,
                      ", grouped by the innermost %d frames" % report.depth if report.depth else "",
                      _e(report.reason))]
    if sus:
        out.append('<p id="suspects" class="suspect"><strong>suspect %s</strong></p>' % _e(ranks_label(sus)))
    if report.adopted_from:
        out.append("<p>Verdict taken from the %s section; the stacks alone said %s.</p>" % (
            _e(report.adopted_from.replace("_", " ")), _e(report.stack_verdict)))
    extra = []
    if report.missing_ranks:
        extra.append("missing ranks (no dumps, no marker): %s" % format_ranks(report.missing_ranks))
    for u in getattr(report, "unreachable", None) or ():
        extra.append("node %s unreachable (did not answer the monitor's probe): ranks %s as last seen%s" % (
            u["node"], u["ranks"] or "(none known)", unreachable_suspects_note(report, u)))
    for r, why in sorted(report.unwatched.items())[:50]:
        extra.append("rank %d unwatched: %s" % (r, why))
    if extra:
        out.append("<ul>%s</ul>" % "".join("<li>%s</li>" % _e(x) for x in extra))
    out.append('<div class="controls" role="search"><label for="rank-filter">Filter by rank (e.g. <code>1</code> or '
               '<code>0,4-7</code>):</label> <input id="rank-filter" type="text" inputmode="numeric" '
               'autocomplete="off" aria-describedby="filter-status"> <button type="button" id="filter-clear">clear'
               '</button> <span id="filter-status" class="muted" role="status" aria-live="polite"></span>'
               '<p id="js-note" class="muted" hidden>The filter hides groups, tree branches and table rows without '
               'those ranks and lists the ranks in the timeline.</p></div></section>')
    out += _groups_html(report, ev)
    out += _tree_html(report)
    if fr:
        out += _fr_html(fr)
    tl, data = _timeline(report, fr_rows)
    out += tl
    ras = report.sections.get("nccl_ras")
    if isinstance(ras, dict):
        out += _section_html("nccl-ras", "NCCL RAS", ras)
    for name, sec in sorted(report.sections.items()):
        if name not in ("flight_recorder", "nccl_ras") and isinstance(sec, dict):
            out += _section_html(name.replace("_", "-"), name.replace("_", " "), sec)
    out.append('<section id="nvidia-smi" aria-labelledby="h-smi"><h2 id="h-smi">nvidia-smi</h2>')
    if ev.smi:
        for rel, text in ev.smi:
            out.append("<details><summary>%s</summary><pre>%s</pre></details>" % (_e(rel), _e(text)))
    else:
        out.append("<p>No nvidia-smi snapshot was captured.</p>")
    out.append("</section>")
    out.append('<section id="evidence" aria-labelledby="h-evidence"><h2 id="h-evidence">Evidence files</h2>')
    if ev.files:
        out.append('<p class="muted">Relative links from this page; they open where the page sits next to the files.'
                   '</p><table><thead><tr><th scope="col">file</th><th scope="col">bytes</th></tr></thead><tbody>')
        for href, rel, size in ev.files:
            out.append('<tr><td><a href="%s">%s</a></td><td>%d</td></tr>' % (_e(href), _e(rel), size))
        out.append("</tbody></table>")
        for d, n in sorted(ev.more.items()):
            out.append("<p>... %d more file%s in <code>%s</code></p>" % (n, "" if n == 1 else "s", _e(d)))
    else:
        out.append("<p>No evidence files listed with this page.</p>")
    out.append("</section>")
    spread = report.sample_spread()
    out.append('<section id="spread" aria-labelledby="h-spread"><h2 id="h-spread">Sample spread</h2>')
    if spread:
        out.append('<table><thead><tr><th scope="col">where</th><th scope="col">ranks</th><th scope="col">first to last'
                   '</th></tr></thead><tbody><tr><th scope="row">all</th><td class="mono">%s</td><td>%.3f s</td></tr>'
                   % (_e(spread["ranks"]), spread["spread_s"]))
        for h, b in spread.get("nodes", {}).items():
            out.append('<tr><th scope="row">%s</th><td class="mono">%s</td><td>%.3f s</td></tr>' % (
                _e(h), _e(b["ranks"]), b["spread_s"]))
        out.append("</tbody></table>")
    else:
        out.append("<p>No capture-stamped stack: the sample times are unknown.</p>")
    out.append("</section>")
    out.append('<section id="warnings" aria-labelledby="h-warnings"><h2 id="h-warnings">Warnings (%d)</h2>' %
               len(report.warnings))
    if report.warnings:
        out.append("<ul>%s</ul>" % "".join("<li>%s</li>" % _e(w) for w in report.warnings))
    else:
        out.append("<p>None.</p>")
    out.append("</section>")
    text = render_text(report).splitlines()  # report.txt (the tree above replaces --tree's text)
    if len(text) > MAX_TEXT_LINES:
        text = text[:MAX_TEXT_LINES] + ["... %d more lines (report.txt / hpc-hangkit report has them all)" % (
            len(text) - MAX_TEXT_LINES)]
    out.append('<section id="text-report" aria-labelledby="h-text"><h2 id="h-text">Text report</h2><pre>%s</pre>'
               '</section>' % _e("\n".join(text)))
    out.append('</main><script type="application/json" id="hk-data">%s</script>' % _json_script(data))
    out.append("<script>%s</script></body></html>\n" % _JS)
    # ASCII only (characters as references): the page reads the same whatever encoding writes it
    return "\n".join(out).encode("ascii", "xmlcharrefreplace").decode("ascii")
