"""Where the paths split: the branch that sent a minority group elsewhere (analysis only).

For a report whose groups stand in different places (MISSED, SPLIT, GONE), compare each
minority group's call chain with the majority's (the largest group): the first user frame
where they part is a function both passed through at different lines. In that function's
source (read where the report runs; the job's own paths), the lint's analysis
(:mod:`hpc_hangkit.lint`) finds the compound statement (``if``/``else``, loop, ``except``)
that contains one path's line and not the other's, preferring the innermost rank-dependent,
then rank-local one; when both lines lie in one block, the rank-dependent early exit
(``return``/``raise``/``continue``/``break``/``sys.exit``) before the line in the function
one group went down into. A group that left by returning or ``sys.exit`` has no chain of its
own: for it, the rank-dependent early exit in a function the majority is still inside (the
one it left), else the innermost rank-dependent branch around the majority's path, is named (the
branch it took past the place where the others wait). A loop that holds the majority's line
while the minority stands after it is named even when its trip count is not known to depend on
the rank (the stacks show it differed). A rank that died (a signal, an exception) is compared
by its last frames. Nothing is named that was not found in the source.

:func:`add_branches` sets ``group.branch`` (``{"file", "line", "text", "kind",
"rank_dependent", "rule"}``; ``rule`` one of :data:`RULES`: which rule found it) and adds one
warning when the sources could not be read.
"""
import ast
import os
import stat
from typing import List, Optional, Sequence

from hpc_hangkit import fsio
from hpc_hangkit.lint.calls import Project
from hpc_hangkit.lint.model import enclosing_chain, functions_of, load_module
from hpc_hangkit.lint.taint import Taint
from hpc_hangkit.parse.model import Frame, basename
from hpc_hangkit.rollcall.frames import is_library_frame

__all__ = ["SPLIT_VERDICTS", "KINDS", "RULES", "MAX_SOURCE_BYTES", "read_source", "find_branch",
           "find_enclosing", "find_left", "group_argument", "add_branches"]

#: verdicts whose groups stand in different places
SPLIT_VERDICTS = ("MISSED", "SPLIT", "GONE")
#: ``branch.kind`` values: an ``if`` (either part), a loop, an ``except`` handler, an early
#: exit before the line
KINDS = ("if", "loop", "except", "early_exit", "group_argument")
#: ``branch.rule`` values (docs/report.md, "split at"): the group's own frames against the
#: majority's; an early exit in a function the majority is still inside; a loop the majority is
#: inside and the group stands after; the branch around the majority's path (ranks that ended);
#: the last frames of a rank that died; the process group passed at the call
RULES = ("own_frames", "inside_left_function", "loop_trip_count", "enclosing", "exit_site", "group_argument")
_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try)
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
#: a source larger than this is not read (a dump can name any path)
MAX_SOURCE_BYTES = 4 << 20


def read_source(path: str) -> str:
    """The text of a Python source a frame names, read defensively: only an absolute path to a
    ``*.py``, a regular file, not through a symbolic link (``O_NOFOLLOW``), at most :data:`MAX_SOURCE_BYTES`;
    as root only a world-readable file (the frames come from the job's own dumps, so root must
    not quote a line of a file the job's user could not read). Raises ``OSError``
    (``PermissionError`` for a refused path)."""
    if not path.endswith(".py"):
        raise PermissionError("not a .py file: %s" % path)
    if not os.path.isabs(path):
        # a short path (py-spy text) could name another file of that name where the report runs
        raise PermissionError("not an absolute path: %s" % path)
    try:
        fd, st = fsio.open_regular(path)
    except fsio.NotRegular:
        raise PermissionError("not a regular file under %d bytes: %s" % (MAX_SOURCE_BYTES, path)) from None
    try:
        if st.st_size > MAX_SOURCE_BYTES:
            raise PermissionError("not a regular file under %d bytes: %s" % (MAX_SOURCE_BYTES, path))
        if os.geteuid() == 0 and not st.st_mode & stat.S_IROTH:
            raise PermissionError("not world-readable, and the report runs as root: %s" % path)
        return fsio.read_fd(fd, st.st_size, MAX_SOURCE_BYTES + 1).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def _user_chain(chain: Sequence[Frame]) -> List[Frame]:
    """Outermost first, user frames with a line only."""
    return [f for f in reversed(chain) if not is_library_frame(f) and f.line > 0]


def _same_place(a: Frame, b: Frame) -> bool:
    return basename(a.file) == basename(b.file) and a.function.rsplit(".", 1)[-1] == b.function.rsplit(".", 1)[-1]


class _Sources:
    """Modules read for this report (a failed read is remembered: ``unreadable``)."""

    def __init__(self):
        self.project = Project()
        self.mods = {}
        self.unreadable = []
        self._done = False

    def get(self, path):
        if path not in self.mods:
            try:
                mod = load_module(path, text=read_source(path))
            except (OSError, SyntaxError, ValueError, RecursionError):
                self.mods[path] = None
                self.unreadable.append(path)
                return None
            self.mods[path] = mod
            self.project.add(mod)
            self._done = False
        mod = self.mods[path]
        if mod is not None and not self._done:
            self.project.propagate()
            self._done = True
        return mod


def _function(mod, name, lines):
    """The innermost function of ``mod`` named ``name`` (last dotted part) that spans every
    line of ``lines``; the module for ``<module>``. ``(qualname, cls, node)`` or None."""
    short = name.rsplit(".", 1)[-1]
    best = None
    for qual, cls, node in functions_of(mod.tree):
        if qual == "<module>":
            if short == "<module>":
                best = (qual, cls, node)
            continue
        if node.name != short:
            continue
        end = getattr(node, "end_lineno", node.lineno)
        if all(node.lineno <= ln <= end for ln in lines) and (best is None or node.lineno > best[2].lineno):
            best = (qual, cls, node)
    return best


def _level(taint, node, field):
    if isinstance(node, ast.If) or isinstance(node, ast.While):
        return taint.test_level(node.test)
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return taint.iter_level(node.iter)
    if isinstance(node, ast.Try) and field == "handlers":
        return 1
    return 0


def _kind(node, field):
    if isinstance(node, ast.If):
        return "if"
    if isinstance(node, ast.Try):
        return "except"
    return "loop"


def _describe(mod, node, kind, level, rule="own_frames"):
    line = node.lineno
    if kind == "except":
        line = next((h.lineno for h in node.handlers), line)
    return {"file": mod.path, "line": line, "text": mod.line_text(line), "kind": kind,
            "rank_dependent": level == 2, "rule": rule}


def _separating(mod, taint, fn, line_a, line_b):
    """The branch of ``fn`` holding one of the two lines and not the other, or None."""
    ca, cb = enclosing_chain(fn, line_a), enclosing_chain(fn, line_b)
    k = 0
    while k < min(len(ca), len(cb)) and ca[k] == cb[k]:
        k += 1
    cands = []
    if k < len(ca) and k < len(cb) and ca[k][0] is cb[k][0] and isinstance(ca[k][0], _BRANCHES):
        node, field = ca[k]
        if field is not None and cb[k][1] is not None:
            # one statement, the two lines in different parts (if/else, try/except)
            cands.append((node, "handlers" if "handlers" in (field, cb[k][1]) else field, k))
    for chain in (ca, cb):
        for depth, (node, field) in enumerate(chain[k:], k):
            if field is not None and isinstance(node, _BRANCHES) and not (
                    isinstance(node, ast.Try) and field != "handlers"):
                if cands and node is cands[0][0] and depth == k:
                    continue
                cands.append((node, field, depth))
    if not cands:
        return None
    scored = [(_level(taint, n, f), d, n, f) for n, f, d in cands]
    lv, _, node, field = max(scored, key=lambda s: (s[0], s[1]))
    # a loop that holds the majority's line (line_b) while the minority stands after it: the
    # minority's trip count there was shorter (the stacks show it), whatever taint knows of it
    trip = [n for n, f, _d in reversed(cands) if isinstance(n, _LOOPS) and f == "body"
            and n.lineno <= line_b <= getattr(n, "end_lineno", n.lineno) < line_a]
    if trip and (lv == 0 or node is trip[0]):
        return _describe(mod, trip[0], "loop", _level(taint, trip[0], "body"), "loop_trip_count")
    if lv == 0:
        return None  # no condition here is known to differ between ranks: name none
    return _describe(mod, node, _kind(node, field), lv)


def _early_exit(mod, taint, fn, line, rule="own_frames"):
    """The last rank-dependent or rank-local ``if`` before ``line`` in ``fn`` that leaves early."""
    best = None
    for node, field in enclosing_chain(fn, line) or [(fn, "body")]:
        body = getattr(node, field, None) if field else None
        for st in (body if isinstance(body, list) else fn.body):
            if getattr(st, "end_lineno", st.lineno) >= line:
                break
            if isinstance(st, ast.If):
                lv = taint.test_level(st.test)
                if lv and any(isinstance(n, _EXITS) for part in (st.body, st.orelse) for s in part
                              for n in ast.walk(s)):
                    best = _describe(mod, st, "early_exit", lv, rule)
                    best["line"] = st.lineno
    return best


def find_branch(minority: Sequence[Frame], majority: Sequence[Frame], sources: Optional[_Sources] = None):
    """The branch separating two call chains (innermost first, as in ``Group.chain``).

    Returns ``(branch, unreadable)``: ``branch`` a dict ``{file, line, text, kind,
    rank_dependent}`` or None; ``unreadable`` the source path that could not be read, or None.
    """
    src = sources or _Sources()
    a, b = _user_chain(minority), _user_chain(majority)
    i = 0
    while i < min(len(a), len(b)) and _same_place(a[i], b[i]) and a[i].line == b[i].line:
        i += 1
    if i >= min(len(a), len(b)) or not _same_place(a[i], b[i]):
        if i == 0:
            return None, None
        i -= 1  # one chain ends where the other calls on: compare in the last shared function
    fa, fb = a[i], b[i]
    mod = src.get(fa.file)
    if mod is None:
        return None, fa.file
    hit = _function(mod, fa.function, [fa.line, fb.line])
    if hit is None:
        return None, None
    qual, cls, fn = hit
    taint = Taint(fn, mod, cls, src.project)
    if fa.line != fb.line:
        br = _separating(mod, taint, fn, fa.line, fb.line)
        if br is not None:
            return br, None
    # same block: an early exit in a function one chain went down into (the majority's: the
    # function the minority left early while the majority is still inside it)
    for chain, rule in ((b, "inside_left_function"), (a, "own_frames")):
        if len(chain) > i + 1:
            f = chain[i + 1]
            m = src.get(f.file)
            if m is None:
                return None, f.file
            h = _function(m, f.function, [f.line])
            if h is not None:
                br = _early_exit(m, Taint(h[2], m, h[1], src.project), h[2], f.line, rule)
                if br is not None:
                    return br, None
    if len(a) == i + 1 and len(b) > i + 1 and a[i].line == b[i].line:
        # the minority stands where the majority's path passes (it came back out, e.g. to a
        # final sys.exit): the branch is on the majority's path below that point
        return _enclosing(b[i + 1:], src)
    return None, None


def find_enclosing(majority: Sequence[Frame], sources: Optional[_Sources] = None):
    """The innermost rank-dependent branch around the majority's path, for a group that left
    without a call chain of its own (it returned or called ``sys.exit``: it never reached
    where the majority waits, so some branch on the majority's path sent it on).

    ``majority`` is a call chain, innermost first. Walks its user frames from the innermost
    out and, in each function, takes the innermost ``if``/loop/``except`` holding the frame's
    line whose condition is rank-dependent. Returns ``(branch, unreadable)`` as
    :func:`find_branch` does; a branch only where the condition is known to depend on the
    rank (a trip count or test merely local to the rank names nothing).
    """
    return _enclosing(_user_chain(majority), sources or _Sources())


def _enclosing(frames: Sequence[Frame], src: _Sources):
    """:func:`find_enclosing` over user frames given outermost first."""
    for f in reversed(frames):
        mod = src.get(f.file)
        if mod is None:
            return None, f.file
        hit = _function(mod, f.function, [f.line])
        if hit is None:
            continue
        taint = Taint(hit[2], mod, hit[1], src.project)
        for node, field in reversed(enclosing_chain(hit[2], f.line)):
            if field is None or not isinstance(node, _BRANCHES) or (isinstance(node, ast.Try) and field != "handlers"):
                continue
            lv = _level(taint, node, field)
            if lv == 2:
                return _describe(mod, node, _kind(node, field), lv, "enclosing"), None
    return None, None


def find_left(majority: Sequence[Frame], sources: Optional[_Sources] = None):
    """The rank-dependent early exit (``return``/``raise``/``continue``/``break`` under an ``if``
    before the frame's line) in a function the majority is still inside, innermost first: where a
    group that ended (returned, ``sys.exit``) left the path the majority is on. ``majority``
    innermost first. Returns ``(branch, unreadable)`` as :func:`find_branch`; only conditions
    known to depend on the rank are named."""
    src = sources or _Sources()
    for f in reversed(_user_chain(majority)):
        mod = src.get(f.file)
        if mod is None:
            return None, f.file
        hit = _function(mod, f.function, [f.line])
        if hit is None:
            continue
        br = _early_exit(mod, Taint(hit[2], mod, hit[1], src.project), hit[2], f.line, "inside_left_function")
        if br is not None and br["rank_dependent"]:
            return br, None
    return None, None


def group_argument(file: str, line: int, sources: Optional[_Sources] = None):
    """Where the process group passed at the call on ``file:line`` was chosen: the call's
    ``group=`` keyword (or ``process_group=``/``pg=``). When it is a name assigned under a
    rank-dependent or rank-local ``if`` earlier in the function, that ``if`` (kind ``if``);
    otherwise the call line itself (kind ``group_argument``). Both with rule ``group_argument``.
    Returns ``(branch, unreadable)``; ``(None, None)`` when the line has no such call."""
    src = sources or _Sources()
    mod = src.get(file)
    if mod is None:
        return None, file
    call = None
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Call) and node.lineno <= line <= getattr(node, "end_lineno", node.lineno):
            kw = next((k for k in node.keywords if k.arg in ("group", "process_group", "pg")), None)
            if kw is not None:
                call = (node, kw.value)
    if call is None:
        return None, None
    node, value = call
    hit = None
    for qual, cls, fn in functions_of(mod.tree):
        if qual != "<module>" and fn.lineno <= line <= getattr(fn, "end_lineno", fn.lineno) and (
                hit is None or fn.lineno > hit[2].lineno):
            hit = (qual, cls, fn)
    if hit is not None and isinstance(value, ast.Name):
        taint = Taint(hit[2], mod, hit[1], src.project)
        best = None
        for st in ast.walk(hit[2]):
            if isinstance(st, ast.If) and st.lineno < line and taint.test_level(st.test) and any(
                    isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == value.id for t in n.targets)
                    for s in st.body + st.orelse for n in ast.walk(s)):
                if best is None or st.lineno > best.lineno:
                    best = st
        if best is not None:
            return _describe(mod, best, "if", taint.test_level(best.test), "group_argument"), None
        chosen = _chosen_in_callee(mod, hit[2], value.id, line, src)
        if chosen is not None:
            return chosen, None
    return {"file": mod.path, "line": node.lineno, "text": mod.line_text(node.lineno), "kind": "group_argument",
            "rank_dependent": False, "rule": "group_argument"}, None


def _chosen_in_callee(mod, fn, name, line, src):
    """When ``name`` is assigned in ``fn`` before ``line`` from a call of a function of the same
    module (``grp = pick_group(...)``), the last rank-dependent or rank-local ``if`` of that
    function whose body assigns or returns: the condition that chose the group. Else None."""
    callees = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and n.lineno < line and isinstance(n.value, ast.Call) \
                and isinstance(n.value.func, ast.Name) and any(isinstance(t, ast.Name) and t.id == name
                                                               for t in n.targets):
            callees.append(n.value.func.id)
    for qual, cls, callee in functions_of(mod.tree):
        if qual == "<module>" or getattr(callee, "name", None) not in callees:
            continue
        taint = Taint(callee, mod, cls, src.project)
        best = None
        for st in ast.walk(callee):
            if isinstance(st, ast.If) and taint.test_level(st.test) and any(
                    isinstance(n, (ast.Assign, ast.Return)) for s in st.body + st.orelse for n in ast.walk(s)):
                if best is None or st.lineno > best.lineno:
                    best = st
        if best is not None:
            return _describe(mod, best, "if", taint.test_level(best.test), "group_argument")
    return None


def add_branches(rep) -> None:
    """Set ``branch`` on each minority group of ``rep`` (a
    :class:`~hpc_hangkit.rollcall.verdict.Report`) whose verdict is in :data:`SPLIT_VERDICTS`;
    add one warning naming the sources that could not be read. Never raises on bad sources."""
    if rep.verdict not in SPLIT_VERDICTS:
        return
    placed = [g for g in rep.groups if g.chain and g.frame is not None]
    # ranks that returned or called sys.exit: no chain of their own, compared by where the others wait
    left = [g for g in rep.groups if g.role == "exited" and not g.chain and (g.exit or {}).get("how") in ("exit", "normal")]
    if not placed or len(placed) + len(left) < 2:
        return
    major = max(placed, key=lambda g: (len(g.ranks), g.role == "waiting"))
    src = _Sources()
    unreadable = []
    # the process group a suspect passed at a call (Flight Recorder membership): that call's group=
    fr = rep.sections.get("flight_recorder") if isinstance(rep.sections, dict) else None
    sites = {}
    for item in ((fr or {}).get("membership") or {}).get("sites") or ():
        if isinstance(item, list) and len(item) == 3 and isinstance(item[0], int) and isinstance(item[2], int):
            sites[item[0]] = (item[1], item[2])
    for g in placed + left:
        if g is major or (rep.suspect_ranks and not set(g.ranks) & set(rep.suspect_ranks)):
            continue
        try:
            at = next((sites[r] for r in g.ranks if r in sites), None)
            br, missing = group_argument(at[0], at[1], src) if at else (None, None)
            if br is None and not missing and g.chain:
                br, missing = find_branch(g.chain, major.chain, src)
                if br is not None and g.role == "exited" and (g.exit or {}).get("how") in (
                        "signal", "vanished", "exception"):
                    br["rule"] = "exit_site"  # compared by the last frames of a rank that died
            elif br is None and not missing:
                br, missing = find_left(major.chain, src)
                if br is None and not missing:
                    br, missing = find_enclosing(major.chain, src)
        except Exception as e:  # noqa: BLE001 -- an odd source must never cost the roll call
            rep.warnings.append("where the paths split: not analysed for %s (%s: %s)"
                                % (g.frame.where() if g.frame else "ranks %s" % g.ranks, type(e).__name__, e))
            br, missing = None, None
        if br is not None:
            g.branch = br
        elif missing and missing not in unreadable:
            unreadable.append(missing)
    if unreadable:
        rep.warnings.append("where the paths split: cannot read the source here (%s); run the report where "
                            "the job's files are to see the branch" % ", ".join(unreadable))
