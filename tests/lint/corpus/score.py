"""Score ``hpc-hangkit lint`` on the corpus of real rank-divergence bugs (this folder).

A *unit* is what one lint run sees: a file ``cNN_name_<variant>.py``, or a folder
``cNN_name/<variant>/`` for a case that spans files. ``variant`` is ``bug`` (the program at
the commit before its fix), ``fixed`` (after the fix) or ``alike`` (correct code that looks
like the bug). A ``pNN_name_alike.py`` (no bug, no fix) is correct code in the shape of a
false alarm the lint raised on the measured projects (docs/lint-measured.md), kept so that the rule
that silenced it stays. Header comments of the unit's files say what is expected:

- ``# expect: HK101 collective=23 branch=19``: one finding of that code whose collective line
  is 23 and whose deciding branch (``related``) is line 19. Lines may name a file of the unit
  (``collective=trainer.py:22``); alternatives are joined with ``|`` (a finding reached
  through helpers may be reported at the call site or at the collective it reaches). ``*`` as
  the code accepts any code (a shape without an agreed rule yet).
- ``# expect: none``: any finding in the unit is a false alarm.
- ``# settings: collectives=a,b`` / ``# settings: rank_sources=x``: passed to
  :func:`hpc_hangkit.lint.lint_paths` (``rank_sources`` only where the installed lint takes it).

:func:`score` lints every unit in-process and returns a :class:`Score`; :func:`render`
prints the per-rule table. Used by tests/lint/test_corpus.py and bench/bench_lint.py.
"""
import inspect
import os
import re
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("bug", "fixed", "alike")
_UNIT_FILE = re.compile(r"^([cp]\d\d_[a-z0-9_]+?)_(bug|fixed|alike)\.py$")
_CASE_DIR = re.compile(r"^[cp]\d\d_[a-z0-9_]+$")
_EXPECT = re.compile(r"^#\s*expect:\s*(.+?)\s*$")
_SETTING = re.compile(r"^#\s*settings:\s*(\w+)\s*=\s*(.+?)\s*$")
_SOURCE = re.compile(r"^#\s*(?:Source|Look-alike of)[: ].*?(https://github\.com/\S+?)[\s):,]")


class Expect:
    """One expected finding: ``code`` (or ``*``), ``collective`` and ``branch`` as lists of
    alternative ``(abs_path, line)``."""

    def __init__(self, code, collective, branch):
        self.code, self.collective, self.branch = code, collective, branch


class Unit:
    """``case`` (``c01_broadcast_rank0``), ``variant``, ``path`` (file or folder handed to
    the lint), ``files`` (its ``*.py``), ``expects`` (list of :class:`Expect`; empty for
    ``none``), ``settings`` (dict of lists), ``source`` (first GitHub link of the headers)."""

    def __init__(self, case, variant, path, files):
        self.case, self.variant, self.path, self.files = case, variant, path, files
        self.expects, self.settings, self.source = [], {}, None
        self.findings = []


def _where(base, here, text):
    out = []
    for alt in text.split("|"):
        path, _, line = alt.rpartition(":")
        out.append((os.path.realpath(os.path.join(base, path)) if path else here, int(line)))
    return out


def _read_headers(unit):
    base = unit.path if os.path.isdir(unit.path) else os.path.dirname(unit.path)
    for f in unit.files:
        here = os.path.realpath(f)
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if not line.startswith("#"):
                    break
                m = _SOURCE.match(line)
                if m and unit.source is None:
                    unit.source = m.group(1)
                m = _SETTING.match(line)
                if m:
                    unit.settings.setdefault(m.group(1), []).extend(x.strip() for x in m.group(2).split(","))
                m = _EXPECT.match(line)
                if not m or m.group(1) == "none":
                    continue
                fields = m.group(1).split()
                kv = dict(x.split("=", 1) for x in fields[1:])
                unit.expects.append(Expect(fields[0], _where(base, here, kv["collective"]),
                                           _where(base, here, kv["branch"])))


def units(root=HERE):
    """Every unit under ``root``, sorted by case then variant (bug, fixed, alike)."""
    out = []
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        m = _UNIT_FILE.match(name)
        if m and os.path.isfile(p):
            out.append(Unit(m.group(1), m.group(2), p, [p]))
        elif _CASE_DIR.match(name) and os.path.isdir(p):
            for v in VARIANTS:
                q = os.path.join(p, v)
                if os.path.isdir(q):
                    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(q) for f in fs if f.endswith(".py"))
                    out.append(Unit(name, v, q, files))
    for u in out:
        _read_headers(u)
    order = {v: i for i, v in enumerate(VARIANTS)}
    out.sort(key=lambda u: (u.case, order[u.variant]))
    return out


def _related(fd):
    """``[(abs_path or None, line)]`` of a finding dict's deciding branch and call chain (not
    the other collectives the branch decides, role ``also``)."""
    rel = fd.get("related")
    entries = rel if isinstance(rel, list) else [rel] if isinstance(rel, dict) else []
    out = []
    for e in entries:
        if e.get("role") == "also":
            continue
        p = e.get("path") or e.get("file")
        out.append((os.path.realpath(p) if p else None, e.get("line")))
    return out


def _hit(where, path, line):
    return any(p == path and n == line for p, n in where)


def match(expect, fd):
    """``(collective_ok, branch_ok)`` of finding dict ``fd`` against ``expect``."""
    path = os.path.realpath(fd["path"])
    also = [e.get("line") for e in fd.get("related") or () if isinstance(e, dict) and e.get("role") == "also"]
    coll = any(_hit(expect.collective, path, n) for n in [fd["line"]] + also)
    branch = any(_hit(expect.branch, p or path, n) for p, n in _related(fd))
    return coll, branch


def _lint_kwargs(unit, accepted):
    kw = {"collectives": tuple(unit.settings.get("collectives", ()))}
    if "level" in accepted:
        # every level: a finding at `note` on a fixed or look-alike program is a false alarm too
        kw["level"] = "note"
    for key, vals in unit.settings.items():
        if key != "collectives" and key in accepted:
            kw[key] = tuple(vals)
    return kw


def run_unit(unit):
    """Lint one unit in-process; sets and returns ``unit.findings`` (list of finding dicts)."""
    from hpc_hangkit.lint import lint_paths
    accepted = set(inspect.signature(lint_paths).parameters)
    res = lint_paths([unit.path], **_lint_kwargs(unit, accepted))
    unit.findings = [f.to_dict() for f in res.findings]
    return unit.findings


class Score:
    """Per unit: ``outcome[(case, variant)]`` is ``found`` (both lines, expected code),
    ``other-code`` (both lines, another code), ``collective-only``, ``branch-only``, ``missed``
    for a bug; the number of findings for a fixed or alike unit. ``rules`` maps a code to its
    counts: ``bugs``, ``found``, ``other_code``, ``one_line``, ``fa_fixed``, ``fa_alike``
    (recall rows by the expected code, false alarms by the reported code)."""

    def __init__(self):
        self.units = []
        self.outcome = OrderedDict()
        self.rules = OrderedDict()
        #: level -> bugs found (both lines, expected code) reported at that level
        self.found_at = {"error": 0, "warning": 0, "note": 0}
        #: level -> false alarms (findings on fixed and look-alike units) at that level
        self.fa_at = {"error": 0, "warning": 0, "note": 0}

    def _row(self, code):
        return self.rules.setdefault(code, {"bugs": 0, "found": 0, "other_code": 0, "one_line": 0,
                                            "fa_fixed": 0, "fa_alike": 0})

    @property
    def bugs(self):
        return sum(r["bugs"] for r in self.rules.values())

    @property
    def found(self):
        """Bugs found with both lines and the expected code."""
        return sum(r["found"] for r in self.rules.values())

    @property
    def found_any_code(self):
        return self.found + sum(r["other_code"] for r in self.rules.values())

    @property
    def false_alarms(self):
        return sum(r["fa_fixed"] + r["fa_alike"] for r in self.rules.values())

    def false_alarms_at(self, prefix):
        return sum(r["fa_fixed"] + r["fa_alike"] for c, r in self.rules.items() if c.startswith(prefix))


def score(root=HERE):
    """Lint every unit under ``root`` and score it (see :class:`Score`)."""
    sc = Score()
    for u in units(root):
        run_unit(u)
        sc.units.append(u)
        if u.variant == "bug":
            for e in u.expects:
                row = sc._row(e.code)
                row["bugs"] += 1
                best = "missed"
                for fd in u.findings:
                    coll, branch = match(e, fd)
                    if coll and branch and (e.code == "*" or fd["code"] == e.code):
                        best = "found"
                        sc.found_at[fd.get("severity", "error")] += 1
                        break
                    if coll and branch:
                        best = "other-code:" + fd["code"]
                    elif best == "missed" and (coll or branch):
                        best = "collective-only" if coll else "branch-only"
                if best == "found":
                    row["found"] += 1
                elif best.startswith("other-code"):
                    row["other_code"] += 1
                elif best != "missed":
                    row["one_line"] += 1
                sc.outcome[(u.case, u.variant)] = best
        else:
            for fd in u.findings:
                sc._row(fd["code"])["fa_" + u.variant] += 1
                sc.fa_at[fd.get("severity", "error")] += 1
            sc.outcome[(u.case, u.variant)] = len(u.findings)
    sc.rules = OrderedDict(sorted(sc.rules.items()))
    return sc


def render(sc):
    """The per-rule table and one line per case, as text."""
    out = ["%-6s %5s %6s %10s %9s %9s %9s" % ("rule", "bugs", "found", "other code", "one line",
                                              "FA fixed", "FA alike")]
    for code, r in sc.rules.items():
        out.append("%-6s %5d %6d %10d %9d %9d %9d" % (code, r["bugs"], r["found"], r["other_code"], r["one_line"],
                                                      r["fa_fixed"], r["fa_alike"]))
    n_fixed = sum(1 for u in sc.units if u.variant == "fixed")
    n_alike = sum(1 for u in sc.units if u.variant == "alike")
    out.append("recall %d/%d with both lines and the code (%d/%d with both lines); false alarms %d "
               "on %d fixed + %d look-alike units"
               % (sc.found, sc.bugs, sc.found_any_code, sc.bugs, sc.false_alarms, n_fixed, n_alike))
    out.append("by level: error %d found, %d false alarms; warning %d found, %d false alarms; "
               "note %d found, %d false alarms"
               % (sc.found_at["error"], sc.fa_at["error"], sc.found_at["warning"], sc.fa_at["warning"],
                  sc.found_at["note"], sc.fa_at["note"]))
    cases = OrderedDict()
    for (case, variant), o in sc.outcome.items():
        cases.setdefault(case, {})[variant] = o
    for case, d in cases.items():
        exp = next((e.code for u in sc.units if u.case == case and u.variant == "bug" for e in u.expects), "-")
        out.append("  %-32s %-6s bug: %-22s fixed: %s  alike: %s" % (case, exp, d.get("bug", "-"), d.get("fixed", "-"),
                                                                    d.get("alike", "-")))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
    print(render(score()), end="")
