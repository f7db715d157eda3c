"""Lint output: text lines (``path:line:col: HK101 message``), JSON, SARIF 2.1.0. Stdlib only."""
import json
import os

from hpc_hangkit import __version__
from hpc_hangkit.lint.rules import RULES, severity_of

__all__ = ["render_text", "render_json", "render_sarif"]

_DOCS = "docs/lint.md"
#: the schema's own id (an identifier; nothing is fetched)
_SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def render_text(result):
    """One ``path:line:col: CODE message [related line N]`` line per finding, then a count line."""
    out = ["%s:%d:%d: %s %s" % (f.path, f.line, f.col, f.code, f.message) for f in result.findings]
    for path, msg in result.errors:
        out.append("%s: cannot check: %s" % (path, msg))
    out.append("%d finding%s in %d file%s (%d lines)" % (
        len(result.findings), "" if len(result.findings) == 1 else "s", result.files,
        "" if result.files == 1 else "s", result.lines))
    return "\n".join(out) + "\n"


def render_json(result):
    """``{"findings": [...], "errors": [{"path", "message"}], "files", "lines"}`` (findings as
    :meth:`hpc_hangkit.lint.rules.Finding.to_dict`)."""
    return json.dumps({"findings": [f.to_dict() for f in result.findings],
                       "errors": [{"path": p, "message": m} for p, m in result.errors],
                       "files": result.files, "lines": result.lines}, indent=2) + "\n"


def _uri(path):
    p = path.replace(os.sep, "/")
    return p[2:] if p.startswith("./") else p


def render_sarif(result):
    """A SARIF 2.1.0 log with one run: the rules of :data:`RULES`, one result per finding
    (the collective, or the call of the helper that reaches it, as the location; the deciding
    branch, then each call on the way and the collective, as related locations), and one
    tool notification per file that could not be parsed."""
    codes = sorted(RULES)
    rules = [{"id": c, "name": RULES[c][0], "shortDescription": {"text": RULES[c][1]},
              "help": {"text": "%s: %s (wrong/right examples: %s)" % (c, RULES[c][1], _DOCS)},
              "defaultConfiguration": {"level": severity_of(c)}} for c in codes]
    results = []
    for f in result.findings:
        loc = {"physicalLocation": {"artifactLocation": {"uri": _uri(f.path)},
                                    "region": {"startLine": f.line, "startColumn": f.col}}}
        rels = []
        for i, r in enumerate(f.related(), 1):
            text = {"branch": "the branch that decides which ranks reach it",
                    "call": "on the way: calls %s" % r.get("what"),
                    "collective": "the collective: %s" % r.get("what")}[r["role"]]
            rels.append({"id": i, "message": {"text": text},
                         "physicalLocation": {"artifactLocation": {"uri": _uri(r["path"])},
                                              "region": {"startLine": r["line"]}}})
        results.append({"ruleId": f.code, "ruleIndex": codes.index(f.code), "level": f.severity,
                        "message": {"text": f.message}, "locations": [loc], "relatedLocations": rels})
    notes = [{"level": "warning", "message": {"text": "cannot check %s: %s" % (p, m)}} for p, m in result.errors]
    run = {"tool": {"driver": {"name": "hpc-hangkit lint", "version": __version__, "rules": rules}},
           "results": results,
           "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notes}]}
    return json.dumps({"$schema": _SARIF_SCHEMA, "version": "2.1.0",
                       "runs": [run]}, indent=2) + "\n"
