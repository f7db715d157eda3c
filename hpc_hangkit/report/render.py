"""Render a :class:`hpc_hangkit.rollcall.Report`: text, JSON (schema v1), call-prefix tree (text, SVG).

All functions are pure (Report in, str out). How to read the text report:
docs/report.md; the JSON schema: docs/report-schema.md.
"""
import json
import time
from typing import Dict, List, Optional, Tuple

from hpc_hangkit.parse.model import is_own_frame
from hpc_hangkit.ranges import format_ranks, parse_ranks, ranks_label
from hpc_hangkit.rollcall.prose import short_where, split_at
from hpc_hangkit.rollcall import Report

__all__ = ["render_text", "render_json", "render_tree", "render_svg", "build_tree", "tree_dict"]

_VIA = 3  # via lines shown per group in the text report
_ROLE_WORD = {"waiting": "waiting at", "divergent": "stopped at", "exited": "exited at",
              "progressing": "moving, now at", "unknown": "unknown"}


def _ranks_label(ranks) -> str:
    return ranks_label(ranks, align=True)


_MAX_GROUPS = 24  # groups printed in the text report; the rest are counted (all are in --json)
_MAX_BRANCHES = 16  # children drawn per tree node (text and SVG); the rest are counted


#: seconds of sample spread (first to last capture sample) above which the text report says it
SPREAD_SHOWN_S = 1.0


def unreachable_suspects_note(report, u: dict) -> str:
    """``"; suspect rank 130: ..."`` when suspects of ``report`` are among the ranks of the
    unreachable-node record ``u`` (their position is the one the node's last answer gave, from
    before it went silent), else ``""``: the text and HTML reports' one wording of it."""
    if not u.get("ranks") or not report.suspect_ranks:
        return ""
    held = sorted(set(report.suspect_ranks) & set(parse_ranks(u["ranks"])))
    if not held:
        return ""
    return "; suspect %s: position as last seen, before the node went silent" % ranks_label(held)


def render_text(report: Report, via: Optional[int] = _VIA, max_groups: int = _MAX_GROUPS) -> str:
    """The human roll call: one block per group (its line, ``via`` call chain), the
    ``=>`` sentence (where the collective is, where the bug is), then check-ins,
    missing/unwatched ranks, exit tracebacks, warnings and extension sections.

    ``via``: how many frames outward of each group's line to print (None: all).
    """
    out: List[str] = []
    checkins = report.checkins()
    n_ranks = max(report.world or 0, len(report.ranks))
    out.append("hpc-hangkit roll call: %s  (%d rank%s, position = mode of the last %d samples%s)" % (
        report.verdict, n_ranks, "" if n_ranks == 1 else "s", report.samples,
        ", grouped by the innermost %d frames" % report.depth if report.depth else ""))
    out.append("")
    shown = report.groups[:max_groups]
    width = min(max([len(_ranks_label(g.ranks)) for g in shown] + [8]), 24)
    for g in shown:
        label = _ranks_label(g.ranks)
        if len(label) > width:  # a long rank set gets its own line
            out.append(label)
            label = ""
        label = label.ljust(width)
        if g.role == "exited" and g.frame is None:  # left the program (its own exit record)
            out.append("%s  %s" % (label, g.detail or "exited"))
            continue
        if g.role == "unknown" or g.frame is None:
            out.append("%s  no position: %s" % (label, g.detail or "no usable stack sample"))
            continue
        word = _ROLE_WORD.get(g.role, g.role)
        if g.role == "exited" and (g.exit or {}).get("how") == "vanished":
            word = "last seen at"  # its last sample, not where it died (a fatal-error dump is where)
        line = "%s  %-14s %s" % (label, word, short_where(g.frame))
        if g.collective:
            top = g.top
            inner = (" -> %s" % short_where(top)) if top is not None and top is not g.frame else ""
            line += "   [in %s%s]" % (g.collective, inner)
        elif g.role in ("waiting", "divergent") and g.state == "stuck":
            line += "   [no collective frame visible]" if g.role == "waiting" else "   [not in a collective]"
        out.append(line)
        for f in g.via(via):
            out.append("%s        via  %s" % (" " * width, short_where(f)))
        for rs, top, api in g.inside:  # detail inside the called API: shown, not a group of its own
            out.append("%s     inside  %s: %s%s" % (" " * width, ranks_label(rs), short_where(api),
                                                   "" if top == api else " -> %s" % short_where(top)))
        if g.branch is not None:
            out.append("%s   split at  %s" % (" " * width, split_at(g.branch)))
        ck = _group_checkins(g, checkins)
        if ck:
            out.append("%s        last check-in: %s" % (" " * width, ck))
        if g.detail and g.role not in ("waiting", "divergent"):
            d = g.detail if len(g.detail) <= 200 else g.detail[:197] + "..."
            out.append("%s        (%s)" % (" " * width, d))
    if len(report.groups) > len(shown):
        rest = report.groups[len(shown):]
        out.append("... %d more group%s (%d ranks): see --json or --tree" % (
            len(rest), "" if len(rest) == 1 else "s", sum(len(g.ranks) for g in rest)))
    if not report.groups:
        out.append("(no rank has a stack sample)")
    out.append("")
    out.append(_wrap("=> " + report.reason, "   "))
    if report.suspect_ranks:
        out.append("")
        out.append("suspect rank%s: %s" % ("" if len(report.suspect_ranks) == 1 else "s",
                                          format_ranks(report.suspect_ranks)))
    spread = report.sample_spread()
    if spread and spread["spread_s"] > SPREAD_SHOWN_S:
        nodes = ", ".join("%s %.1f s" % (h, b["spread_s"]) for h, b in spread["nodes"].items())
        out.append("")
        out.append(_wrap("stacks taken %.1f s apart (first to last capture sample of ranks %s%s): "
                         "the ranks were not seen at one instant" % (
                             spread["spread_s"], spread["ranks"],
                             "; per node: " + nodes if len(spread["nodes"]) > 1 else ""), "  "))
    if checkins:
        out.append("")
        if all(c["counter"] == 0 for c in checkins.values()):
            out.append("last check-ins: no rank called checkpoint() yet (heartbeats show arming only)")
        else:
            out.append("last check-ins (checkpoint labels, from heartbeats):")
            for r, c in checkins.items():
                age = "" if c["age_s"] is None else ", %s ago" % _age(c["age_s"])
                if c["counter"] == 0:
                    out.append("  rank %d never checked in (armed%s)" % (r, age))
                else:
                    out.append("  rank %d last checked in: %s%s (check-in #%d)" % (
                        r, json.dumps(c["label"]) if c["label"] else "(no label)", age, c["counter"]))
    if report.missing_ranks:
        out.append("")
        out.append("missing ranks (no dumps, no marker; world size %s): %s" % (
            report.world, format_ranks(report.missing_ranks)))
    if report.unreachable:
        out.append("")
        out.append("unreachable nodes (did not answer the monitor's probe; their ranks as last seen):")
        for u in report.unreachable:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(u["since"]))
            ranks = ranks_label(parse_ranks(u["ranks"])) if u["ranks"] else "no rank known"
            out.append("  node %s: %s, since %s%s%s" % (
                u["node"], ranks, when, " (%s)" % u["why"] if u.get("why") else "",
                unreachable_suspects_note(report, u)))
    if report.unwatched:
        out.append("")
        out.append("unwatched ranks (never armed):")
        for r, why in sorted(report.unwatched.items()):
            out.append("  rank %d: %s" % (r, why))
    sus = set(report.suspect_ranks)
    tbs = [(r, f) for r, f in sorted(report.ranks.items(), key=lambda kv: (kv[0] not in sus, kv[0]))
           if f.state == "exited" and f.traceback]
    if tbs:
        out.append("")
        shown = tbs[:3]
        for r, f in shown:
            out.append("rank %d last traceback:" % r)
            for ln in f.traceback[-14:]:
                out.append("  | " + ln)
        if len(tbs) > len(shown):
            out.append("(%d more exited ranks with tracebacks: see --json)" % (len(tbs) - len(shown)))
    for name, sec in sorted(report.sections.items()):
        if not isinstance(sec, dict):
            continue
        out.append("")
        out.append("[%s] %s" % (name.replace("_", " "), sec.get("summary") or ""))
        for ln in sec.get("text") or ():
            out.append("  " + str(ln))
    if report.warnings:
        out.append("")
        out.append("warnings (%d):" % len(report.warnings))
        for w in report.warnings[:40]:
            out.append("  " + w)
        if len(report.warnings) > 40:
            out.append("  ... %d more (see --json)" % (len(report.warnings) - 40))
    return "\n".join(out) + "\n"


def _group_checkins(g, checkins) -> str:
    """``"step 3", 41 s ago`` for a group whose ranks share a label; per-label rank sets otherwise."""
    by: Dict[str, List[int]] = {}
    ages: Dict[str, float] = {}
    for r in g.ranks:
        c = checkins.get(r)
        if not c or not c["counter"]:
            continue
        lab = c["label"] or "(no label)"
        by.setdefault(lab, []).append(r)
        if c["age_s"] is not None:
            ages[lab] = max(ages.get(lab, 0.0), c["age_s"])
    if not by:
        return ""
    parts = []
    for lab, rs in sorted(by.items(), key=lambda kv: kv[1][0])[:4]:
        age = ", %s ago" % _age(ages[lab]) if lab in ages else ""
        who = "" if len(by) == 1 and len(rs) == len(g.ranks) else " (%s)" % _ranks_label(rs).replace("  ", " ")
        parts.append("%s%s%s" % (json.dumps(lab), age, who))
    return "; ".join(parts)


def _age(s: float) -> str:
    if s < 120:
        return "%d s" % round(s)
    if s < 7200:
        return "%d min" % round(s / 60)
    return "%.1f h" % (s / 3600)


def _wrap(text: str, indent: str, width: int = 100) -> str:
    words = text.split(" ")
    lines, cur = [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = indent + w
        else:
            cur = (cur + " " + w) if cur else w
    if cur:
        lines.append(cur)
    return "\n".join(lines)


def render_json(report: Report, tree: bool = False) -> str:
    """``report.to_dict()`` as indented JSON (schema v1, docs/report-schema.md); with
    ``tree``, also ``"tree"``: the call-prefix tree (:func:`tree_dict`)."""
    d = report.to_dict()
    if tree:
        d["tree"] = tree_dict(report)
    return json.dumps(d, indent=2, sort_keys=False, default=str) + "\n"


def tree_dict(report: Report) -> list:
    """The call-prefix tree as JSON: a list of ``{"frame": {file, line, function},
    "ranks": "0,2-3", "children": [...]}``, outermost frames at the top level."""
    def node(n):
        kids = sorted(n.children.values(), key=lambda c: (-len(c.ranks), c.ranks[0]))
        return {"frame": {"file": n.frame.file, "line": n.frame.line, "function": n.frame.function},
                "ranks": format_ranks(n.ranks), "children": [node(c) for c in kids]}

    root = build_tree(report)
    return [node(c) for c in sorted(root.children.values(), key=lambda c: (-len(c.ranks), c.ranks[0]))]


# --- call-prefix tree (STAT-style) ------------------------------------------------

class _Node:
    __slots__ = ("frame", "ranks", "children")

    def __init__(self, frame):
        self.frame = frame
        self.ranks = []
        self.children: Dict[tuple, "_Node"] = {}


def build_tree(report: Report):
    """The merged call-prefix tree: root -> outermost frames -> ... -> innermost.

    Each node holds the ranks whose main-thread chain passes through it. Frames
    compare as (base name, line, function) like the grouping does; hpc-hangkit's own
    frames (the auto check-in's wrapper) are left out, as the groups leave them out.
    Returns the root node (``frame`` None).
    """
    root = _Node(None)
    for r, chain in sorted(report.rank_chains.items()):
        node = root
        node.ranks.append(r)
        for f in reversed(chain):
            if is_own_frame(f.file):
                continue
            k = (f.file.rsplit("/", 1)[-1], f.line, f.function.rsplit(".", 1)[-1])
            child = node.children.get(k)
            if child is None:
                child = node.children[k] = _Node(f)
            child.ranks.append(r)
            node = child
    return root


def _role_of(report: Report) -> Dict[int, str]:
    roles = {}
    for g in report.groups:
        for r in g.ranks:
            roles[r] = g.role
    return roles


def render_tree(report: Report) -> str:
    """The call-prefix tree as text, one frame per line with its rank set on each branch::

        [0-3] hang_gloo.py:85 in <module>
        +-[0,2-3] hang_gloo.py:76 in train
        | +-[0,2-3] hang_gloo.py:61 in sync_grads
        +-[1] hang_gloo.py:78 in train
    """
    root = build_tree(report)
    suspects = set(report.suspect_ranks)
    out = ["call-prefix tree (outermost frame first; [ranks] on each branch; * = suspect ranks only)"]
    if not root.children:
        out.append("(no rank has a stack sample)")
        return "\n".join(out) + "\n"

    def walk(node, prefix, is_last, top):
        mark = " *" if node.ranks and set(node.ranks) <= suspects else ""
        label = "[%s] %s%s" % (format_ranks(node.ranks), short_where(node.frame), mark)
        if top:
            out.append(label)
            child_prefix = ""
        else:
            out.append(prefix + "+-" + label)
            child_prefix = prefix + ("  " if is_last else "| ")
        kids = sorted(node.children.values(), key=lambda n: (-len(n.ranks), n.ranks[0]))
        more = kids[_MAX_BRANCHES:]
        kids = kids[:_MAX_BRANCHES]
        for i, c in enumerate(kids):
            walk(c, child_prefix, i == len(kids) - 1 and not more, False)
        if more:
            out.append(child_prefix + "+-... %d more branches (%d ranks)" % (
                len(more), sum(len(c.ranks) for c in more)))

    kids = sorted(root.children.values(), key=lambda n: (-len(n.ranks), n.ranks[0]))
    for c in kids:
        walk(c, "", True, True)
    return "\n".join(out) + "\n"


def _esc(s: str) -> str:
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"))


def render_svg(report: Report) -> str:
    """The call-prefix tree as a standalone SVG picture (plain SVG 1.1 text, no scripts).

    Left to right: outermost frame to innermost; each box shows the rank set and
    the frame; boxes holding only suspect ranks are red, only waiting ranks
    blue, exited grey, mixed white. A title line carries the verdict.
    """
    root = build_tree(report)
    suspects = set(report.suspect_ranks)
    roles = _role_of(report)
    boxes: List[Tuple[int, float, "_Node"]] = []
    edges: List[Tuple[int, float, int, float]] = []
    leaf = [0]

    def place(node, depth):
        kids = sorted(node.children.values(), key=lambda n: (-len(n.ranks), n.ranks[0]))[:_MAX_BRANCHES]
        if not kids:
            y = float(leaf[0])
            leaf[0] += 1
        else:
            ys = [place(c, depth + 1) for c in kids]
            y = (ys[0] + ys[-1]) / 2.0
            for c, cy in zip(kids, ys):
                edges.append((depth, y, depth + 1, cy))
        boxes.append((depth, y, node))
        return y

    tops = sorted(root.children.values(), key=lambda n: (-len(n.ranks), n.ranks[0]))
    for c in tops:
        place(c, 0)
    bw, bh, gx, gy, mx, my = 260, 44, 40, 16, 20, 50
    max_depth = max([d for d, _, _ in boxes] + [0])
    width = mx * 2 + (max_depth + 1) * (bw + gx)
    height = my + max(leaf[0], 1) * (bh + gy) + 40

    def xy(d, y):
        return mx + d * (bw + gx), my + y * (bh + gy)

    parts = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
             'font-family="monospace" font-size="11">' % (width, height, width, height),
             '<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>' % (width, height),
             '<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>' % (
                 mx, _esc("hpc-hangkit roll call: %s%s" % (
                     report.verdict, "  suspects: %s" % format_ranks(report.suspect_ranks)
                     if report.suspect_ranks else "")))]
    for d1, y1, d2, y2 in edges:
        x1, yy1 = xy(d1, y1)
        x2, yy2 = xy(d2, y2)
        parts.append('<path d="M%d %d C%d %d %d %d %d %d" stroke="#888" fill="none"/>' % (
            x1 + bw, yy1 + bh / 2, x1 + bw + gx / 2, yy1 + bh / 2, x2 - gx / 2, yy2 + bh / 2, x2, yy2 + bh / 2))
    for d, y, node in boxes:
        x, yy = xy(d, y)
        rs = set(node.ranks)
        rl = {roles.get(r) for r in rs}
        if rs and rs <= suspects:
            fill = "#f8c8c8"
        elif rl == {"waiting"}:
            fill = "#cfe0f8"
        elif rl == {"exited"}:
            fill = "#dddddd"
        else:
            fill = "#ffffff"
        f = node.frame
        where = short_where(f)
        if len(where) > 40:
            where = "..." + where[-37:]
        parts.append('<g><title>%s</title>' % _esc("%s\nranks %s" % (f.where(), format_ranks(node.ranks))))
        parts.append('<rect x="%d" y="%d" width="%d" height="%d" rx="5" fill="%s" stroke="#444"/>' % (
            x, yy, bw, bh, fill))
        rtxt = format_ranks(node.ranks)
        if len(rtxt) > 38:
            rtxt = rtxt[:35] + "..."
        parts.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (
            x + 6, yy + 17, _esc("%s (%d)" % (rtxt, len(rs)))))
        parts.append('<text x="%d" y="%d">%s</text></g>' % (x + 6, yy + 34, _esc(where)))
    parts.append('<text x="%d" y="%d" fill="#555">%s</text>' % (
        mx, height - 12, _esc("outermost frame on the left; red: suspect ranks only; blue: waiting ranks")))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
