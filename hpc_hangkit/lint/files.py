"""Which files the lint reads: ``*.py`` under the given paths, minus excluded ones. Stdlib only."""
import fnmatch
import os

__all__ = ["DEFAULT_EXCLUDE", "iter_files"]

#: directory names never entered (a virtual environment or build output is not the user's code)
DEFAULT_EXCLUDE = (".git", ".hg", "__pycache__", ".venv", "venv", ".tox", ".nox", ".eggs", "build", "dist",
                   "node_modules", ".mypy_cache", ".pytest_cache")


def _excluded(path, patterns, roots=()):
    """``path`` matches a pattern by its base name, as given, normalized (``./a/b`` as ``a/b``),
    or relative to one of the directories ``roots`` that holds it."""
    if not patterns:
        return False
    forms = {os.path.basename(path), path, os.path.normpath(path)}
    if roots:
        full = os.path.abspath(path)
        for r in roots:
            rel = os.path.relpath(full, r)
            if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
                forms.add(rel)
    return any(fnmatch.fnmatch(f, p) for f in forms for p in patterns)


def iter_files(paths, exclude=(), roots=()):
    """Yield every ``*.py`` file under ``paths`` in sorted order, leaving out those that match
    a glob of ``exclude`` (see :func:`_excluded`: by name, as given, or relative to a directory
    of ``roots``), files given by name included. Symbolic links to directories are not
    followed. Raises ``FileNotFoundError`` for a path that does not exist."""
    patterns = tuple(exclude)
    roots = tuple(os.path.abspath(r) for r in roots)
    for p in paths:
        if not os.path.exists(p):
            raise FileNotFoundError(p)
        if os.path.isfile(p):
            if not _excluded(p, patterns, roots):
                yield p
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if d not in DEFAULT_EXCLUDE and not d.startswith(".")
                             and not _excluded(os.path.join(root, d), patterns, roots))
            for f in sorted(files):
                full = os.path.join(root, f)
                if f.endswith(".py") and not _excluded(full, patterns, roots):
                    yield full
