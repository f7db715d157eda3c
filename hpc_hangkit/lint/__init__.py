"""``hpc-hangkit lint``: a static checker for collectives that only some ranks reach.

Stdlib ``ast`` only. :func:`lint_paths` is the whole pipeline: find the files, parse each
once to index its functions (:mod:`.model`, :mod:`.calls`), propagate "reaches a
collective" and "returns a rank-dependent value" across the tree, then re-read only the
modules that reach a collective and run the rules (:mod:`.rules`) on them. docs/lint.md.
"""

__all__ = ["lint_paths", "LintResult"]


class LintResult:
    """``findings`` (sorted :class:`~hpc_hangkit.lint.rules.Finding`), ``errors`` (list of
    ``(path, message)`` for files that could not be read or parsed), ``files`` (number
    of files scanned), ``lines`` (their total lines)."""

    def __init__(self):
        self.findings = []
        self.errors = []
        self.files = 0
        self.lines = 0


def lint_paths(paths, *, select=None, ignore=None, exclude=(), collectives=(), rank_sources=()):
    """Lint every ``*.py`` under ``paths`` (files or directories).

    ``select``/``ignore``: iterables of codes or code prefixes (``"HK1"``); ``exclude``:
    glob patterns matched against each path and each directory name; ``collectives``:
    extra collective names (see :func:`hpc_hangkit.lint.collectives.extend`); ``rank_sources``:
    extra names of calls/attributes whose value is the rank (see
    :func:`hpc_hangkit.lint.collectives.extend_rank_sources`).
    Returns a :class:`LintResult`. Raises ``FileNotFoundError`` for a path that does not exist.
    """
    from hpc_hangkit.lint import collectives as C

    saved = C.snapshot()
    C.extend(collectives)
    C.extend_rank_sources(rank_sources)
    try:
        return _lint(paths, select, ignore, exclude)
    finally:
        C.restore(saved)


def _lint(paths, select, ignore, exclude):
    from hpc_hangkit.lint.calls import Project
    from hpc_hangkit.lint.files import iter_files
    from hpc_hangkit.lint.model import functions_of, load_module
    from hpc_hangkit.lint.rules import check_module

    res = LintResult()
    project = Project()
    reach = []
    for path in iter_files(paths, exclude):
        try:
            mod = load_module(path)
        except (SyntaxError, ValueError, OSError, RecursionError) as e:
            res.errors.append((path, "%s: %s" % (type(e).__name__, e)))
            continue
        res.files += 1
        res.lines += len(mod.lines)
        project.add(mod)
        mod.tree, mod.local = None, {}  # re-read below only where a collective is reached
        for ff in mod.funcs.values():
            ff.node = None
        mod.lines = []
        reach.append(mod)
    project.propagate()
    for mod in reach:
        if not mod.has_p2p and not any(ff.witness for ff in mod.funcs.values()):
            continue
        fresh = load_module(mod.path, name=mod.name)
        for qual, cls, node in functions_of(fresh.tree):
            if qual in mod.funcs:
                mod.funcs[qual].node = node
        mod.tree, mod.lines, mod.local = fresh.tree, fresh.lines, fresh.local
        res.findings.extend(check_module(project, mod))
        mod.tree, mod.lines, mod.local = None, [], {}
        for ff in mod.funcs.values():
            ff.node = None

    def wanted(code):
        if select and not any(code.startswith(s) for s in select):
            return False
        return not (ignore and any(code.startswith(s) for s in ignore))
    res.findings = [f for f in res.findings if wanted(f.code)]
    return res
