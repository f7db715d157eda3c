"""Lint output: text lines (``path:line:col: HK101 message``), JSON, SARIF 2.1.0. Stdlib only."""
import json
import os

from hpc_hangkit import __version__
from hpc_hangkit.lint.rules import LEVELS, RULES, severity_of

__all__ = ["render_text", "render_json", "render_sarif"]

_DOCS = "docs/lint.md"
#: the schema's own id (an identifier; nothing is fetched)
_SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def render_text(result):
    """One ``path:line:col: CODE [level] message`` line per finding (the collective, or the call
    of the helper that reaches it); for one reached through helpers a second line at the
    collective's own ``path:line:col`` saying where it is reached from (so that an editor lands
    on both); then a count line (findings, not lines, and how many are at each level; and how
    many were left out below the level asked for, with the ``--level`` that shows them)."""
    out = []
    for f in result.findings:
        out.append("%s:%d:%d: %s [%s] %s" % (f.path, f.line, f.col, f.code, f.severity, f.message))
        if f.chain:
            c = f.collective_at()
            out.append("%s:%d:%d: %s [%s] %s: the collective of the finding at %s:%d:%d (line %d: `%s`), through %s" % (
                c["path"], c["line"], c["col"], f.code, f.severity, c["what"], f.path, f.line, f.col, f.related_line,
                f.related_text, " -> ".join([f.message.split(" ", 1)[0]] + [w for _, _, _, w, _ in f.chain])))
    for path, line, msg in result.warnings:
        out.append("%s:%d: warning: %s" % (path, line, msg))
    for path, msg in result.errors:
        out.append("%s: cannot check: %s" % (path, msg))
    levels = []
    for level in LEVELS:
        n = sum(1 for f in result.findings if f.severity == level)
        if n:
            levels.append("%d %s%s" % (n, level, "" if n == 1 else "s"))
    hidden = sorted(result.below, key=LEVELS.index)
    below = ", ".join("%d %s%s" % (result.below[lv], lv, "" if result.below[lv] == 1 else "s") for lv in hidden)
    n_err = len(result.errors)
    out.append("%d finding%s%s in %d file%s (%d line%s)%s%s" % (
        len(result.findings), "" if len(result.findings) == 1 else "s",
        " (%s)" % ", ".join(levels) if levels else "", result.files,
        "" if result.files == 1 else "s", result.lines, "" if result.lines == 1 else "s",
        "; not shown: %s (--level %s)" % (below, hidden[-1]) if below else "",
        "; %d file%s could not be checked (above)" % (n_err, "" if n_err == 1 else "s") if n_err else ""))
    return "\n".join(out) + "\n"


def render_json(result):
    """``{"findings": [...], "errors": [{"path", "message"}], "warnings": [{"path", "line",
    "message"}], "files", "lines", "level", "below": {level: count}}`` (findings as
    :meth:`hpc_hangkit.lint.rules.Finding.to_dict`; ``level``: the least certain level reported;
    ``below``: the findings left out for being below it)."""
    return json.dumps({"findings": [f.to_dict() for f in result.findings],
                       "errors": [{"path": p, "message": m} for p, m in result.errors],
                       "warnings": [{"path": p, "line": n, "message": m} for p, n, m in result.warnings],
                       "files": result.files, "lines": result.lines, "level": result.level,
                       "below": result.below}, indent=2) + "\n"


def _escape(text):
    """SARIF message text with embedded links: a literal ``\\``, ``[`` or ``]`` is escaped."""
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


#: the base id of relative paths: the directory the lint ran in (``originalUriBaseIds``)
_BASE = "%SRCROOT%"


def _uri(path):
    """A path as a SARIF ``artifactLocation`` (its ``uri`` a URI reference, RFC 3986): an
    absolute path as a ``file://`` URI, a relative one as a reference relative to
    :data:`_BASE`; both percent-encoded (a space, ``#`` or ``%`` in a name would otherwise
    make another URI)."""
    from urllib.parse import quote
    p = path.replace(os.sep, "/")
    if os.path.isabs(path):
        return {"uri": "file://" + quote(p)}
    return {"uri": quote(p[2:] if p.startswith("./") else p), "uriBaseId": _BASE}


def render_sarif(result):
    """A SARIF 2.1.0 log with one run: the rules of :data:`RULES`, one result per finding
    (the collective, or the call of the helper that reaches it, as the location, and then the
    collective's own line as a second location; the deciding branch, then each call on the
    way and the collective, and the other collectives the same branch decides, as related
    locations, the message linking the branch and the collective), and one
    tool notification (level ``error``) per file that could not be parsed; then the
    invocation is not successful. Relative paths are relative to ``%SRCROOT%``, the current
    directory (``originalUriBaseIds``)."""
    from urllib.parse import quote
    codes = sorted(RULES)
    rules = [{"id": c, "name": RULES[c][0], "shortDescription": {"text": RULES[c][1]},
              "help": {"text": "%s: %s (wrong/right examples: %s)" % (c, RULES[c][1], _DOCS)},
              "defaultConfiguration": {"level": severity_of(c)}} for c in codes]
    results = []
    for f in result.findings:
        loc = {"physicalLocation": {"artifactLocation": _uri(f.path),
                                    "region": {"startLine": f.line, "startColumn": f.col}}}
        locs = [loc]
        msg = f.message
        related = f.related()
        if f.chain:
            # the collective's own line is a second location of the result (a viewer lists it
            # with the call), and the message links to it and to the branch (embedded links
            # name relatedLocation ids; literal brackets are escaped)
            c = f.collective_at()
            locs.append({"physicalLocation": {"artifactLocation": _uri(c["path"]),
                                              "region": {"startLine": c["line"], "startColumn": c["col"]}},
                         "message": {"text": "the collective: %s" % c["what"]}})
            # the ids are the positions in f.related(): the branch first, the collective after
            # the origin lines and the calls on the way
            roles = [r["role"] for r in related]
            msg = "%s. Branch: [line %d](%d); the collective: [%s at %s:%d](%d)" % (
                _escape(f.message), f.related_line, roles.index("branch") + 1, _escape(c["what"]),
                os.path.basename(c["path"]), c["line"], roles.index("collective") + 1)
        rels = []
        for i, r in enumerate(related, 1):
            text = {"branch": "the branch that decides which ranks reach it",
                    "call": "on the way: calls %s" % r.get("what"),
                    "collective": "the collective: %s" % r.get("what"),
                    "also": "another collective the same branch decides",
                    "origin": "where the test's %s gets its rank dependence" % r.get("what")}[r["role"]]
            rels.append({"id": i, "message": {"text": text},
                         "physicalLocation": {"artifactLocation": _uri(r["path"]),
                                              "region": {"startLine": r["line"]}}})
        results.append({"ruleId": f.code, "ruleIndex": codes.index(f.code), "level": f.severity,
                        "message": {"text": msg}, "locations": locs, "relatedLocations": rels})
    notes = [{"level": "error", "message": {"text": "cannot check %s: %s" % (p, m)},
              "locations": [{"physicalLocation": {"artifactLocation": _uri(p)}}]} for p, m in result.errors]
    notes += [{"level": "warning", "message": {"text": m},
               "locations": [{"physicalLocation": {"artifactLocation": _uri(p), "region": {"startLine": n}}}]}
              for p, n, m in result.warnings]
    run = {"tool": {"driver": {"name": "hpc-hangkit lint", "version": __version__, "rules": rules}},
           "results": results,
           # a file left unchecked is a run that did not do all it was asked (as the exit status)
           "invocations": [{"executionSuccessful": not result.errors, "toolExecutionNotifications": notes}],
           "originalUriBaseIds": {_BASE: {"uri": "file://" + quote(os.getcwd().replace(os.sep, "/").rstrip("/") + "/")}},
           # what was asked for, and what was left out below it (SARIF has no field of its own)
           "properties": {"level": result.level, "below": result.below}}
    return json.dumps({"$schema": _SARIF_SCHEMA, "version": "2.1.0",
                       "runs": [run]}, indent=2) + "\n"
